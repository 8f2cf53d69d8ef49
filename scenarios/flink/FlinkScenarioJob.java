import java.io.BufferedWriter;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.api.java.tuple.Tuple5;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.legacy.RichSinkFunction;
import org.apache.flink.streaming.api.functions.source.legacy.RichParallelSourceFunction;
import org.apache.flink.util.Collector;

/**
 * One run of a statecert scenario on Apache Flink (local mini-cluster): the scenario's input splits as a source
 * (one subtask per split, its offset in union list state, pausing at each epoch's end until a checkpoint holding that
 * offset completed), the keyed running aggregate in a KeyedProcessFunction with ValueState, and a two-phase-commit
 * sink that stages each checkpoint's outputs and appends them to a file when the checkpoint completes. The timeline's
 * task failures are thrown by the keyed subtask; savepoints, stop-with-savepoint and cancel are the JobClient's.
 * Usage: {@code FlinkScenarioJob <spec.json>}; prints one JSON line starting with {@code result }.
 */
public final class FlinkScenarioJob {
    /** (split, offset, key, weight, epoch) and (key, split, offset, total). */
    static final Map<Long, Map<Integer, Long>> OFFSETS = new ConcurrentHashMap<>();
    static final Map<Long, AtomicInteger> SINK_COMMITS = new ConcurrentHashMap<>();
    static final Map<Integer, Long> EMITTED = new ConcurrentHashMap<>();
    static final AtomicInteger MAX_ATTEMPT = new AtomicInteger();
    static final AtomicInteger COMPLETED = new AtomicInteger();
    static final Map<Integer, AtomicBoolean> FAILED = new ConcurrentHashMap<>();
    static JsonNode SPEC;
    /** Sources hold at the end of this epoch of the run (0: no hold) until the main thread moves it on. */
    static volatile long HOLD_EPOCH;

    static int epochSize() {
        return SPEC.get("records_per_epoch").asInt();
    }

    /** The scenario's records of one split, read from the input file the Python side wrote. */
    static List<Tuple4<Integer, Long, String, Long>> recordsOf(int split) throws IOException {
        List<Tuple4<Integer, Long, String, Long>> records = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(SPEC.get("input").asText()), StandardCharsets.UTF_8)) {
            String[] f = line.split("\t", -1);
            if (Integer.parseInt(f[0]) == split) {
                records.add(Tuple4.of(split, Long.parseLong(f[1]), f[2], Long.parseLong(f[3])));
            }
        }
        return records;
    }

    static final class Splits extends RichParallelSourceFunction<Tuple5<Integer, Long, String, Long, Integer>>
            implements CheckpointedFunction, CheckpointListener {
        private volatile boolean running = true;
        private transient ListState<Tuple2<Integer, Long>> offsets;
        private volatile long offset;
        private long runStart;
        private volatile long released = -1;
        private transient Object lock;

        int split() {
            return getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            lock = new Object();
            offsets = context.getOperatorStateStore().getUnionListState(
                    new ListStateDescriptor<>("offsets", Types.TUPLE(Types.INT, Types.LONG)));
            offset = 0;
            for (Tuple2<Integer, Long> o : offsets.get()) {
                if (o.f0 == split()) offset = o.f1;
            }
            runStart = SPEC.get("start_offsets").has(String.valueOf(split()))
                    ? SPEC.get("start_offsets").get(String.valueOf(split())).asLong()
                    : offset;
        }

        @Override
        public void run(SourceContext<Tuple5<Integer, Long, String, Long, Integer>> ctx) throws Exception {
            List<Tuple4<Integer, Long, String, Long>> records = recordsOf(split());
            int size = epochSize();
            while (running) {
                long hold = HOLD_EPOCH > 0 ? Math.min(records.size(), runStart + HOLD_EPOCH * size) : records.size();
                if (offset >= hold) { // held where the next savepoint, stop or cancel comes, or the input is done
                    Thread.sleep(5);
                    continue;
                }
                Tuple4<Integer, Long, String, Long> r = records.get((int) offset);
                int epoch = (int) ((offset - runStart) / size) + 1;
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(Tuple5.of(r.f0, r.f1, r.f2, r.f3, epoch));
                    offset++;
                    EMITTED.put(split(), offset);
                }
                if ((offset - runStart) % size == 0 || offset == records.size()) {
                    long boundary = offset;
                    synchronized (lock) { // the epoch ends: on once a completed checkpoint holds this offset
                        while (running && released < boundary) {
                            lock.wait(20);
                        }
                    }
                }
            }
        }

        @Override
        public void cancel() {
            running = false;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            offsets.update(List.of(Tuple2.of(split(), offset)));
            OFFSETS.computeIfAbsent(context.getCheckpointId(), k -> new ConcurrentHashMap<>()).put(split(), offset);
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Long captured = OFFSETS.getOrDefault(checkpointId, Map.of()).get(split());
            if (captured != null) {
                synchronized (lock) {
                    released = Math.max(released, captured);
                    lock.notifyAll();
                }
            }
            if (split() == 0) COMPLETED.incrementAndGet();
        }
    }

    /** The keyed running aggregate; throws once where the timeline puts a task failure. */
    static final class Aggregate
            extends KeyedProcessFunction<String, Tuple5<Integer, Long, String, Long, Integer>, Tuple4<String, Integer, Long, Long>>
            implements CheckpointedFunction {
        private transient ValueState<Long> total;
        private int lastEpoch;

        @Override
        public void open(OpenContext context) {
            total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
            MAX_ATTEMPT.accumulateAndGet(getRuntimeContext().getTaskInfo().getAttemptNumber(), Math::max);
        }

        private void failIfDue(String phase, int epoch) {
            int task = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int i = 0;
            for (JsonNode event : SPEC.get("events")) {
                if (event.get("action").asText().equals("task-failure") && event.get("phase").asText().equals(phase)
                        && event.get("task").asInt() == task && epoch >= event.get("epoch").asInt()
                        && FAILED.computeIfAbsent(i, k -> new AtomicBoolean()).compareAndSet(false, true)) {
                    throw new RuntimeException("statecert scenario: task failure of subtask " + task + " in epoch "
                            + epoch + " (" + phase + ")");
                }
                i++;
            }
        }

        @Override
        public void processElement(Tuple5<Integer, Long, String, Long, Integer> r, Context ctx,
                Collector<Tuple4<String, Integer, Long, Long>> out) throws Exception {
            lastEpoch = Math.max(lastEpoch, r.f4);
            failIfDue("processing", r.f4);
            long t = (total.value() == null ? 0 : total.value()) + r.f3;
            total.update(t);
            out.collect(Tuple4.of(r.f2, r.f0, r.f1, t));
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) {
            failIfDue("snapshot", lastEpoch);
        }

        @Override
        public void initializeState(FunctionInitializationContext context) {}
    }

    /** Stages outputs per checkpoint (in operator state) and appends them to its file when the checkpoint completes:
     * each line names the run and checkpoint it was staged in, and a (run, checkpoint) commits once. */
    static final class TwoPhaseSink extends RichSinkFunction<Tuple4<String, Integer, Long, Long>>
            implements CheckpointedFunction, CheckpointListener {
        private transient List<String> buffer;
        private transient Map<String, List<String>> pending;
        private transient ListState<Tuple2<String, String>> staged;

        @Override
        public void invoke(Tuple4<String, Integer, Long, Long> value, Context context) {
            buffer.add(value.f0 + "\t" + value.f1 + "\t" + value.f2 + "\t" + value.f3);
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            buffer = new ArrayList<>();
            pending = new HashMap<>();
            staged = context.getOperatorStateStore().getListState(
                    new ListStateDescriptor<>("staged", Types.TUPLE(Types.STRING, Types.STRING)));
            for (Tuple2<String, String> s : staged.get()) {
                pending.computeIfAbsent(s.f0, k -> new ArrayList<>()).add(s.f1);
            }
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            String txn = SPEC.get("run").asText() + ":" + context.getCheckpointId();
            pending.computeIfAbsent(txn, k -> new ArrayList<>()).addAll(buffer);
            buffer.clear();
            List<Tuple2<String, String>> all = new ArrayList<>();
            pending.forEach((t, lines) -> lines.forEach(l -> all.add(Tuple2.of(t, l))));
            staged.update(all);
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) throws Exception {
            Path dir = Paths.get(SPEC.get("output_dir").asText());
            String run = SPEC.get("run").asText();
            List<String> txns = new ArrayList<>(pending.keySet());
            // in the order they were staged: by run, then checkpoint id (a savepoint's waits for the next checkpoint)
            txns.sort((x, y) -> {
                String[] a = x.split(":"), b = y.split(":");
                int byRun = Integer.compare(Integer.parseInt(a[0]), Integer.parseInt(b[0]));
                return byRun != 0 ? byRun : Long.compare(Long.parseLong(a[1]), Long.parseLong(b[1]));
            });
            for (String txn : txns) {
                String[] parts = txn.split(":");
                boolean ours = parts[0].equals(run);
                if (ours && Long.parseLong(parts[1]) > checkpointId) continue;
                Path marker = dir.resolve("committed-" + txn.replace(':', '-') + "-" + getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
                if (!Files.exists(marker)) { // committed once: the lines, then the marker
                    Path file = dir.resolve("output-" + parts[0] + ".tsv");
                    try (BufferedWriter w = Files.newBufferedWriter(file, StandardCharsets.UTF_8,
                            StandardOpenOption.CREATE, StandardOpenOption.APPEND)) {
                        for (String line : pending.get(txn)) {
                            w.write(line);
                            w.newLine();
                        }
                    }
                    Files.createFile(marker);
                }
                pending.remove(txn);
            }
            SINK_COMMITS.computeIfAbsent(checkpointId, k -> new AtomicInteger()).incrementAndGet();
        }
    }

    /** The first completed checkpoint whose offsets reach `target` for every split and which every sink committed. */
    static Long committedAt(Map<Integer, Long> target, int sinks) {
        Long best = null;
        for (Map.Entry<Long, Map<Integer, Long>> e : OFFSETS.entrySet()) {
            AtomicInteger commits = SINK_COMMITS.get(e.getKey());
            if (commits == null || commits.get() < sinks || e.getValue().size() < target.size()) continue;
            boolean reached = target.entrySet().stream()
                    .allMatch(t -> e.getValue().getOrDefault(t.getKey(), -1L) >= t.getValue());
            if (reached && (best == null || e.getKey() < best)) best = e.getKey();
        }
        return best;
    }

    static Long awaitCommitted(Map<Integer, Long> target, int sinks, JobClient job) throws Exception {
        long deadline = System.currentTimeMillis() + SPEC.get("timeout_ms").asLong();
        while (true) {
            Long at = committedAt(target, sinks);
            if (at != null) return at;
            JobStatus status = job.getJobStatus().get();
            if (status.isGloballyTerminalState()) return null;
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("timed out waiting for a checkpoint");
            Thread.sleep(10);
        }
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        SPEC = mapper.readTree(new File(args[0]));
        Configuration conf = new Configuration();
        SPEC.get("config").fields().forEachRemaining(e -> conf.setString(e.getKey(), e.getValue().asText()));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        int parallelism = SPEC.get("parallelism").asInt();
        int splits = SPEC.get("splits").asInt();
        env.setMaxParallelism(SPEC.get("max_parallelism").asInt());
        env.addSource(new Splits(), Types.TUPLE(Types.INT, Types.LONG, Types.STRING, Types.LONG, Types.INT))
                .setParallelism(splits).uid("source").name("source")
                .keyBy(r -> r.f2, Types.STRING)
                .process(new Aggregate(), Types.TUPLE(Types.STRING, Types.INT, Types.LONG, Types.LONG))
                .setParallelism(parallelism).uid("aggregate").name("aggregate")
                .addSink(new TwoPhaseSink()).setParallelism(parallelism).uid("sink").name("sink");
        List<JsonNode> operations = new ArrayList<>();
        for (JsonNode event : SPEC.get("events")) {
            if (!event.get("action").asText().equals("task-failure")) operations.add(event);
        }
        HOLD_EPOCH = operations.isEmpty() ? 0 : operations.get(0).get("epoch").asLong();
        JobClient job = env.executeAsync("statecert-scenario");
        ObjectNode result = mapper.createObjectNode();
        List<String> savepoints = new ArrayList<>();
        boolean ended = false;
        boolean cancelled = false;
        int size = SPEC.get("records_per_epoch").asInt();
        try {
            for (int e = 0; e < operations.size(); e++) {
                JsonNode event = operations.get(e);
                String action = event.get("action").asText();
                Map<Integer, Long> target = new HashMap<>();
                for (int s = 0; s < splits; s++) {
                    long start = SPEC.get("start_offsets").path(String.valueOf(s)).asLong(0);
                    long length = SPEC.get("lengths").get(s).asLong();
                    target.put(s, Math.min(length, start + (long) event.get("epoch").asInt() * size));
                }
                if (awaitCommitted(target, parallelism, job) == null) break;
                SavepointFormatType format = event.path("format").asText("canonical").equals("native")
                        ? SavepointFormatType.NATIVE : SavepointFormatType.CANONICAL;
                String dir = SPEC.get("savepoint_dir").asText();
                if (action.equals("savepoint")) {
                    savepoints.add(job.triggerSavepoint(dir, format).get());
                    HOLD_EPOCH = e + 1 < operations.size() ? operations.get(e + 1).get("epoch").asLong() : 0;
                } else if (action.equals("stop-with-savepoint")) {
                    savepoints.add(job.stopWithSavepoint(false, dir, format).get());
                    ended = true;
                    break;
                } else if (action.equals("cancel")) {
                    job.cancel().get();
                    cancelled = true;
                    ended = true;
                    break;
                }
            }
            if (!ended) { // the input runs out: once all of it is committed, a final canonical savepoint stops the job
                Map<Integer, Long> target = new HashMap<>();
                for (int s = 0; s < splits; s++) target.put(s, SPEC.get("lengths").get(s).asLong());
                if (awaitCommitted(target, parallelism, job) != null) {
                    result.put("final_savepoint", job.stopWithSavepoint(false, SPEC.get("savepoint_dir").asText(),
                            SavepointFormatType.CANONICAL).get());
                }
            }
            if (!cancelled) {
                job.getJobExecutionResult().get(60, TimeUnit.SECONDS);
            }
        } catch (Exception e) {
            JobStatus status;
            try {
                status = job.getJobStatus().get();
            } catch (Exception gone) { // the mini-cluster shut down with the job
                status = cancelled ? JobStatus.CANCELED : JobStatus.FAILED;
            }
            if (status == JobStatus.FAILED) {
                result.put("job_failed", true);
                Throwable root = e;
                while (root.getCause() != null && root.getCause() != root) root = root.getCause();
                result.put("failure", root.getClass().getName() + ": " + root.getMessage());
            } else if (status != JobStatus.CANCELED && status != JobStatus.FINISHED) {
                result.put("error", String.valueOf(e));
            }
        }
        result.set("savepoints", mapper.valueToTree(savepoints));
        result.put("completed_checkpoints", COMPLETED.get());
        result.put("failovers", MAX_ATTEMPT.get());
        result.set("offsets", mapper.valueToTree(OFFSETS));
        System.out.println("result " + mapper.writeValueAsString(result));
        System.exit(0);
    }
}
