import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.legacy.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.SourceFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

/**
 * Writes the Flink snapshots statecert's Flink reader is checked against: a small keyed job (a String-keyed operator
 * with value, tuple, row, list, map and Kryo-serialized state, and a Long-keyed one) runs on Flink's local
 * mini-cluster until every record is processed, then one snapshot is taken. Usage:
 * {@code FlinkSavepoints <out-dir> <hashmap|rocksdb> <canonical|native|checkpoint> <compressed|plain> [incremental] [files] [decodable-only]}
 * ({@code files}: every stream in a file of its own, not inline in {@code _metadata}).
 * The records and therefore the state are fixed, so tests know the expected state without running Flink.
 */
public final class FlinkSavepoints {
    static final int RECORDS = 60;
    static final AtomicLong PROCESSED = new AtomicLong();
    static boolean WITH_OPAQUE = true;

    /** A POJO: Flink serializes it with its POJO serializer, a column the reader reports as undecodable. */
    public static class Point {
        public long x;
        public long y;

        public Point() {}

        public Point(long x, long y) {
            this.x = x;
            this.y = y;
        }
    }

    /** The i-th record: a word out of seven and a number. */
    static Tuple2<String, Long> record(int i) {
        String[] words = {"apple", "berry", "cherry", "date", "elder", "fig", "grape"};
        return Tuple2.of(words[(i * 5) % words.length], (long) i);
    }

    /** Emits the fixed records, then idles until cancelled so that a snapshot can be taken of a running job. */
    static final class Records implements SourceFunction<Tuple2<String, Long>> {
        private volatile boolean running = true;

        @Override
        public void run(SourceContext<Tuple2<String, Long>> ctx) throws Exception {
            for (int i = 0; i < RECORDS && running; i++) {
                synchronized (ctx.getCheckpointLock()) {
                    ctx.collect(record(i));
                }
            }
            while (running) {
                Thread.sleep(20);
            }
        }

        @Override
        public void cancel() {
            running = false;
        }
    }

    /** Per word: a count (Long), a (Integer, Double) tuple, a named row, the numbers seen (list), flags per parity
     * (map), a list of (String, Long) tuples and a map of String to (Integer, Double) rows (nested composites), and
     * a UUID that Flink serializes with Kryo and a POJO (columns the reader must report as undecodable). */
    static final class Words extends KeyedProcessFunction<String, Tuple2<String, Long>, String> {
        transient ValueState<Long> count;
        transient ValueState<Tuple2<Integer, Double>> pair;
        transient ValueState<Row> row;
        transient ListState<Long> seen;
        transient MapState<Integer, Boolean> parity;
        transient ValueState<UUID> opaque;
        transient ValueState<Point> point;
        transient ValueState<List<Tuple2<String, Long>>> history;
        transient ValueState<Map<String, Row>> totals;

        @Override
        public void open(OpenContext context) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            pair = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("pair", Types.TUPLE(Types.INT, Types.DOUBLE)));
            row = getRuntimeContext().getState(new ValueStateDescriptor<>(
                    "row", Types.ROW_NAMED(new String[] {"word", "last", "even"}, Types.STRING, Types.LONG, Types.BOOLEAN)));
            seen = getRuntimeContext().getListState(new ListStateDescriptor<>("seen", Types.LONG));
            parity = getRuntimeContext().getMapState(new MapStateDescriptor<>("parity", Types.INT, Types.BOOLEAN));
            if (WITH_OPAQUE) {
                opaque = getRuntimeContext().getState(
                        new ValueStateDescriptor<>("opaque", TypeInformation.of(new TypeHint<UUID>() {})));
                point = getRuntimeContext().getState(new ValueStateDescriptor<>("point", Types.POJO(Point.class)));
            }
            history = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("history", Types.LIST(Types.TUPLE(Types.STRING, Types.LONG))));
            totals = getRuntimeContext().getState(new ValueStateDescriptor<>(
                    "totals", Types.MAP(Types.STRING, Types.ROW(Types.INT, Types.DOUBLE))));
        }

        @Override
        public void processElement(Tuple2<String, Long> in, Context ctx, Collector<String> out) throws Exception {
            long n = count.value() == null ? 0 : count.value();
            count.update(n + 1);
            Tuple2<Integer, Double> p = pair.value() == null ? Tuple2.of(0, 0.0) : pair.value();
            pair.update(Tuple2.of(p.f0 + 1, p.f1 + in.f1 / 2.0));
            row.update(Row.of(in.f0, in.f1, in.f1 % 2 == 0));
            seen.add(in.f1);
            parity.put((int) (in.f1 % 3), in.f1 % 2 == 0);
            if (WITH_OPAQUE) {
                opaque.update(new UUID(in.f1, n));
                point.update(new Point(in.f1, n));
            }
            List<Tuple2<String, Long>> h = history.value() == null ? new ArrayList<>() : new ArrayList<>(history.value());
            h.add(Tuple2.of(in.f0, in.f1));
            history.update(h);
            Map<String, Row> t = totals.value() == null ? new HashMap<>() : new HashMap<>(totals.value());
            String parityName = in.f1 % 2 == 0 ? "even" : "odd";
            Row previous = t.get(parityName);
            t.put(parityName, Row.of(previous == null ? 1 : (Integer) previous.getField(0) + 1,
                    (previous == null ? 0.0 : (Double) previous.getField(1)) + in.f1));
            totals.update(t);
            out.collect(in.f0);
            PROCESSED.incrementAndGet();
        }
    }

    /** Per bucket (a Long key): the sum of the numbers as an Integer and the words as a String. */
    static final class Buckets extends KeyedProcessFunction<Long, Tuple2<String, Long>, String> {
        transient ValueState<Integer> sum;
        transient ValueState<String> words;

        @Override
        public void open(OpenContext context) {
            sum = getRuntimeContext().getState(new ValueStateDescriptor<>("sum", Types.INT));
            words = getRuntimeContext().getState(new ValueStateDescriptor<>("words", Types.STRING));
        }

        @Override
        public void processElement(Tuple2<String, Long> in, Context ctx, Collector<String> out) throws Exception {
            sum.update((sum.value() == null ? 0 : sum.value()) + in.f1.intValue());
            words.update(words.value() == null ? in.f0 : words.value() + "," + in.f0);
            PROCESSED.incrementAndGet();
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        String backend = args[1], kind = args[2];
        boolean compressed = args[3].equals("compressed");
        List<String> flags = List.of(args).subList(4, args.length);
        boolean incremental = flags.contains("incremental");
        // a heap checkpoint records no value lengths: a Kryo or POJO value ends its reading
        WITH_OPAQUE = !flags.contains("decodable-only");
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", backend);
        conf.setString("execution.checkpointing.dir", out.resolve("checkpoints").toUri().toString());
        conf.setString("execution.checkpointing.savepoint-dir", out.resolve("savepoints").toUri().toString());
        conf.setString("execution.checkpointing.snapshot-compression", String.valueOf(compressed));
        conf.setString("execution.checkpointing.incremental", String.valueOf(incremental));
        conf.setString("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        if (flags.contains("files")) { // every stream in a file of its own instead of inline in _metadata
            conf.setString("execution.checkpointing.data-inline-threshold", "0 b");
        }
        if (kind.equals("checkpoint")) {
            conf.setString("execution.checkpointing.interval", "300 ms");
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        var input = env.addSource(new Records(), Types.TUPLE(Types.STRING, Types.LONG)).setParallelism(1).uid("records");
        input.keyBy(r -> r.f0, Types.STRING).process(new Words(), Types.STRING).uid("words").name("words")
                .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>()).uid("words-sink");
        input.keyBy(r -> r.f1 % 4, Types.LONG).process(new Buckets(), Types.STRING).uid("buckets").name("buckets")
                .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>()).uid("buckets-sink");
        JobClient job = env.executeAsync("statecert-flink-savepoints");
        long deadline = System.currentTimeMillis() + 120_000;
        while (PROCESSED.get() < 2L * RECORDS) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("records not processed");
            Thread.sleep(20);
        }
        String pointer;
        if (kind.equals("checkpoint")) {
            Path checkpoints = out.resolve("checkpoints").resolve(job.getJobID().toString());
            List<Path> before = completed(checkpoints);
            while (completed(checkpoints).size() <= before.size() + 1) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no checkpoint completed");
                Thread.sleep(50);
            }
            job.cancel().get();
            List<Path> all = completed(checkpoints);
            pointer = all.get(all.size() - 1).toString();
        } else {
            SavepointFormatType format = kind.equals("native") ? SavepointFormatType.NATIVE : SavepointFormatType.CANONICAL;
            pointer = job.stopWithSavepoint(false, out.resolve("savepoints").toUri().toString(), format).get();
        }
        System.out.println("pointer " + pointer);
        System.exit(0);
    }

    /** The completed checkpoints of a job (those with a `_metadata`), oldest first. */
    static List<Path> completed(Path checkpoints) throws Exception {
        List<Path> done = new ArrayList<>();
        if (!Files.isDirectory(checkpoints)) return done;
        try (Stream<Path> children = Files.list(checkpoints)) {
            children.filter(p -> p.getFileName().toString().startsWith("chk-"))
                    .filter(p -> new File(p.toFile(), "_metadata").exists())
                    .sorted((a, b) -> Integer.compare(number(a), number(b)))
                    .forEach(done::add);
        }
        return done;
    }

    static int number(Path chk) {
        return Integer.parseInt(chk.getFileName().toString().substring(4));
    }
}
