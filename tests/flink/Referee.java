// Flink's own answers for the differential tests (tests/flink): a line-based process on Flink's classes. Each request
// is one line of space-separated words, each answer one line; text travels as hex of its UTF-16 code units, so any
// Java string (and any key statecert hashes) crosses unchanged.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.FallbackKey;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.checkpoint.CheckpointException;
import org.apache.flink.runtime.checkpoint.CheckpointFailureManager;
import org.apache.flink.runtime.checkpoint.CheckpointFailureReason;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.util.TimeUtils;

public final class Referee {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        for (String line; (line = in.readLine()) != null; ) {
            String[] w = line.split(" ", -1);
            String answer;
            try {
                answer = answer(w);
            } catch (Throwable t) {
                answer = "error " + t.getClass().getName();
            }
            out.println(answer);
            out.flush();
        }
    }

    private static String answer(String[] w) throws Exception {
        switch (w[0]) {
            case "kg": return keyGroups(w);
            case "ranges": return ranges(Integer.parseInt(w[1]), Integer.parseInt(w[2]));
            case "owners": return owners(Integer.parseInt(w[1]), Integer.parseInt(w[2]));
            case "defaultmax": return "ok " + KeyGroupRangeAssignment.computeDefaultMaxParallelism(Integer.parseInt(w[1]));
            case "duration": return "ok " + TimeUtils.parseDuration(text(w[1])).toMillis();
            case "memory": return "ok " + MemorySize.parse(text(w[1])).getBytes();
            case "options": return options(w);
            case "counted": return counted();
            case "load": return load(text(w.length > 1 ? w[1] : ""));
            case "typed": return typed(w[1], text(w.length > 2 ? w[2] : ""));
            default: return "error unknown request " + w[0];
        }
    }

    private static Object key(String type, String word) {
        switch (type) {
            case "string": return text(word);
            case "long": return Long.parseLong(word);
            case "int": return Integer.parseInt(word);
            case "short": return Short.parseShort(word);
            case "byte": return Byte.parseByte(word);
            case "double": return Double.longBitsToDouble(Long.parseLong(word));
            case "boolean": return Boolean.parseBoolean(word);
            default: throw new IllegalArgumentException(type);
        }
    }

    // kg <type> <max parallelism> <key>...: each key's key group
    private static String keyGroups(String[] w) {
        int maxParallelism = Integer.parseInt(w[2]);
        StringBuilder b = new StringBuilder("ok");
        for (int i = 3; i < w.length; i++) {
            b.append(' ').append(KeyGroupRangeAssignment.assignToKeyGroup(key(w[1], w[i]), maxParallelism));
        }
        return b.toString();
    }

    // ranges <max parallelism> <parallelism>: each operator index's key-group range, start and end
    private static String ranges(int maxParallelism, int parallelism) {
        StringBuilder b = new StringBuilder("ok");
        for (int i = 0; i < parallelism; i++) {
            KeyGroupRange r =
                    KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(maxParallelism, parallelism, i);
            b.append(' ').append(r.getStartKeyGroup()).append(' ').append(r.getEndKeyGroup());
        }
        return b.toString();
    }

    // owners <max parallelism> <parallelism>: the operator index of every key group
    private static String owners(int maxParallelism, int parallelism) {
        StringBuilder b = new StringBuilder("ok");
        for (int g = 0; g < maxParallelism; g++) {
            b.append(' ').append(
                    KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(maxParallelism, parallelism, g));
        }
        return b.toString();
    }

    // load <hex of key=value lines>: what Flink's loaders make of a job configuration (the cluster's empty):
    // backend changelog incremental storage checkpoint-dir savepoint-dir inline-threshold timers, texts in hex and
    // "-" for none; or the exception's class
    private static String load(String lines) throws Exception {
        java.util.Map<String, String> map = new java.util.LinkedHashMap<>();
        for (String line : lines.split("\n")) {
            int eq = line.indexOf('=');
            if (eq > 0) {
                map.put(line.substring(0, eq), line.substring(eq + 1));
            }
        }
        org.apache.flink.configuration.Configuration job = org.apache.flink.configuration.Configuration.fromMap(map);
        org.apache.flink.configuration.Configuration cluster = new org.apache.flink.configuration.Configuration();
        ClassLoader loader = Referee.class.getClassLoader();
        org.slf4j.Logger log = org.slf4j.helpers.NOPLogger.NOP_LOGGER;
        org.apache.flink.runtime.state.StateBackend backend =
                org.apache.flink.runtime.state.StateBackendLoader.fromApplicationOrConfigOrDefault(
                        null, job, cluster, loader, log);
        boolean changelog = org.apache.flink.runtime.state.StateBackendLoader.isChangelogStateBackend(backend);
        org.apache.flink.runtime.state.StateBackend inner = backend;
        if (backend instanceof org.apache.flink.runtime.state.delegate.DelegatingStateBackend) {
            inner = ((org.apache.flink.runtime.state.delegate.DelegatingStateBackend) backend)
                    .getDelegatedStateBackend();
        }
        String name = inner.getClass().getSimpleName();
        boolean incremental = false;
        String timers = "-";
        if (inner instanceof org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend) {
            org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend rocksdb =
                    (org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend) inner;
            incremental = rocksdb.isIncrementalCheckpointsEnabled();
            timers = rocksdb.getPriorityQueueStateType().name();
        }
        org.apache.flink.runtime.state.CheckpointStorage storage =
                org.apache.flink.runtime.state.CheckpointStorageLoader.load(null, backend, job, cluster, loader, log);
        String dir = "-", savepoints = "-", threshold = "-";
        if (storage instanceof org.apache.flink.runtime.state.storage.FileSystemCheckpointStorage) {
            org.apache.flink.runtime.state.storage.FileSystemCheckpointStorage fs =
                    (org.apache.flink.runtime.state.storage.FileSystemCheckpointStorage) storage;
            dir = path(fs.getCheckpointPath());
            savepoints = path(fs.getSavepointPath());
            threshold = String.valueOf(fs.getMinFileSizeThreshold());
        } else if (storage instanceof org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage) {
            org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage jm =
                    (org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage) storage;
            dir = path(jm.getCheckpointPath());
            savepoints = path(jm.getSavepointPath());
        }
        return String.join(" ", "ok", name, String.valueOf(changelog), String.valueOf(incremental),
                storage.getClass().getSimpleName(), dir, savepoints, threshold, timers);
    }

    private static String path(org.apache.flink.core.fs.Path path) {
        return path == null ? "-" : hex(path.toString());
    }

    // typed <int|long|double|boolean|enum> <hex>: a value set as text read back through a typed ConfigOption (enum:
    // Flink's CheckpointingMode), as Flink's Configuration converts it
    private static String typed(String type, String value) {
        org.apache.flink.configuration.Configuration conf = new org.apache.flink.configuration.Configuration();
        conf.setString("statecert.k", value);
        org.apache.flink.configuration.ConfigOptions.OptionBuilder key =
                org.apache.flink.configuration.ConfigOptions.key("statecert.k");
        Object got;
        switch (type) {
            case "int": got = conf.get(key.intType().noDefaultValue()); break;
            case "long": got = conf.get(key.longType().noDefaultValue()); break;
            case "double": got = conf.get(key.doubleType().noDefaultValue()); break;
            case "boolean": got = conf.get(key.booleanType().noDefaultValue()); break;
            case "enum":
                got = conf.get(key.enumType(org.apache.flink.core.execution.CheckpointingMode.class).noDefaultValue());
                break;
            default: throw new IllegalArgumentException(type);
        }
        return "ok " + hex(String.valueOf(got));
    }

    // counted: for every CheckpointFailureReason, whether one failed checkpoint of it counts toward the tolerable
    // failure number (CheckpointFailureManager.checkFailureCounter raises its continuous failure counter), as
    // REASON:1 or REASON:0
    private static String counted() throws Exception {
        Field counter = CheckpointFailureManager.class.getDeclaredField("continuousFailureCounter");
        counter.setAccessible(true);
        StringBuilder b = new StringBuilder("ok");
        for (CheckpointFailureReason reason : CheckpointFailureReason.values()) {
            CheckpointFailureManager manager = new CheckpointFailureManager(0,
                    new CheckpointFailureManager.FailJobCallback() {
                        public void failJob(Throwable cause) {}

                        public void failJobDueToTaskFailure(Throwable cause, ExecutionAttemptID task) {}
                    });
            manager.checkFailureCounter(new CheckpointException(reason), 1L);
            int count = ((java.util.concurrent.atomic.AtomicInteger) counter.get(manager)).get();
            b.append(' ').append(reason.name()).append(':').append(count > 0 ? 1 : 0);
        }
        return b.toString();
    }

    // options <class>...: every public static ConfigOption of the classes, as key,type,default,fallbacks with the
    // text fields in hex; a fallback is its key's hex, then ':d' when deprecated
    private static String options(String[] w) throws Exception {
        List<String> found = new ArrayList<>();
        for (int i = 1; i < w.length; i++) {
            for (Field f : Class.forName(w[i]).getFields()) {
                if (!Modifier.isStatic(f.getModifiers()) || !ConfigOption.class.isAssignableFrom(f.getType())) {
                    continue;
                }
                ConfigOption<?> o = (ConfigOption<?>) f.get(null);
                java.lang.reflect.Method clazz = ConfigOption.class.getDeclaredMethod("getClazz");
                clazz.setAccessible(true);
                String type = ((Class<?>) clazz.invoke(o)).getSimpleName();
                String value = o.hasDefaultValue() ? hex(plain(o.defaultValue())) : "-";
                StringBuilder fallbacks = new StringBuilder();
                for (FallbackKey k : o.fallbackKeys()) {
                    fallbacks.append(fallbacks.length() == 0 ? "" : ";").append(hex(k.getKey()));
                    fallbacks.append(k.isDeprecated() ? ":d" : "");
                }
                found.add(hex(o.key()) + "," + type + "," + value + "," + fallbacks + "," + hex(w[i] + "." + f.getName()));
            }
        }
        return "ok " + String.join(" ", found);
    }

    // a default as statecert's catalog holds it: a duration in milliseconds, a memory size in bytes, an enum's name
    private static String plain(Object value) {
        if (value instanceof java.time.Duration) {
            return String.valueOf(((java.time.Duration) value).toMillis());
        }
        if (value instanceof MemorySize) {
            return String.valueOf(((MemorySize) value).getBytes());
        }
        if (value instanceof Enum) {
            return ((Enum<?>) value).name();
        }
        return String.valueOf(value);
    }

    private static String text(String hex) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i + 4 <= hex.length(); i += 4) {
            b.append((char) Integer.parseInt(hex.substring(i, i + 4), 16));
        }
        return b.toString();
    }

    private static String hex(String text) {
        StringBuilder b = new StringBuilder();
        for (char c : text.toCharArray()) {
            b.append(String.format("%04x", (int) c));
        }
        return b.length() == 0 ? "" : b.toString();
    }
}
