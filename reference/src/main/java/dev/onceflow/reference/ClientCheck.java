package dev.onceflow.reference;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.NodeApiVersions;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.message.ApiVersionsResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.ApiVersionsResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * The Apache Kafka Java client against a broker (issue 10): Onceflow or Apache Kafka, the same
 * program for both.  Each mode prints one JSON line on stdout (the Python tests parse it) and
 * exits 0 when it could run; a failure to run prints {"mode", "error_class", "error"} and exits 1.
 *
 * <pre>
 *   versions BOOTSTRAP             the broker's ApiVersions answer, and the version of each client
 *                                  API this client would use with it (what NetworkClient negotiates)
 *   ctp BOOTSTRAP PREFIX COUNT [GROUP_PROTOCOL]
 *                                  consume-transform-produce: COUNT records in, a transactional
 *                                  producer with sendOffsetsToTransaction(offsets,
 *                                  consumer.groupMetadata()), one transaction aborted on purpose and
 *                                  its input re-processed, then a read_committed check of the output;
 *                                  the consumer's group.protocol is GROUP_PROTOCOL (classic, the
 *                                  default, or consumer: KIP-848)
 *   consumer-protocol BOOTSTRAP PREFIX
 *                                  a consumer with group.protocol=consumer (KIP-848): what it reads,
 *                                  or the exception it fails with
 * </pre>
 */
public final class ClientCheck {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);
    private static final int PARTITIONS = 3;

    public static void main(String[] args) {
        String mode = args.length > 0 ? args[0] : "";
        Map<String, Object> result;
        try {
            switch (mode) {
                case "versions" -> result = versions(args[1]);
                case "ctp" -> result = ctp(args[1], args[2], Integer.parseInt(args[3]), args.length > 4 ? args[4] : "classic");
                case "consumer-protocol" -> result = consumerProtocol(args[1], args[2]);
                default -> {
                    System.err.println("usage: ClientCheck versions|ctp|consumer-protocol BOOTSTRAP [PREFIX [COUNT [GROUP_PROTOCOL]]]");
                    System.exit(2);
                    return;
                }
            }
        } catch (Exception e) {
            result = new LinkedHashMap<>();
            result.put("mode", mode);
            result.put("error_class", e.getClass().getName());
            result.put("error", String.valueOf(e.getMessage()));
            System.out.println(Json.write(result));
            System.exit(1);
            return;
        }
        result.put("client_version", AppInfoParser.getVersion());
        System.out.println(Json.write(result));
        System.exit(0);  // client threads must not keep the JVM alive
    }

    // -- versions ---------------------------------------------------------------------------------

    /** One ApiVersions exchange on a plain socket, then the client's own negotiation rule
     *  (NodeApiVersions.latestUsableVersion: the highest version both sides know). */
    static Map<String, Object> versions(String bootstrap) throws Exception {
        String[] hostPort = bootstrap.split(",")[0].split(":");
        short version = ApiKeys.API_VERSIONS.latestVersion();
        ApiVersionsRequest request = new ApiVersionsRequest.Builder().build(version);
        RequestHeader header = new RequestHeader(ApiKeys.API_VERSIONS, version, "onceflow-client-check", 1);
        ApiVersionsResponseData data;
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(hostPort[0], Integer.parseInt(hostPort[1])), 10_000);
            socket.setSoTimeout(30_000);
            ByteBuffer body = request.serializeWithHeader(header);
            OutputStream out = socket.getOutputStream();
            out.write(ByteBuffer.allocate(4).putInt(body.remaining()).array());
            out.write(body.array(), body.arrayOffset() + body.position(), body.remaining());
            out.flush();
            DataInputStream in = new DataInputStream(socket.getInputStream());
            byte[] frame = new byte[in.readInt()];
            in.readFully(frame);
            ByteBuffer buffer = ByteBuffer.wrap(frame);
            buffer.getInt();  // correlation id: the ApiVersions response header is always v0
            data = ApiVersionsResponse.parse(new ByteBufferAccessor(buffer), version).data();
        }
        NodeApiVersions node = new NodeApiVersions(data.apiKeys(), data.supportedFeatures(),
                data.finalizedFeatures(), data.finalizedFeaturesEpoch());
        Map<String, Object> usable = new TreeMap<>();
        Map<String, Object> brokerRange = new TreeMap<>();
        for (ApiKeys api : ApiKeys.clientApis()) {
            ApiVersionsResponseData.ApiVersion range = data.apiKeys().find(api.id);
            brokerRange.put(api.name, range == null ? null : List.of(range.minVersion(), range.maxVersion()));
            try {
                usable.put(api.name, node.latestUsableVersion(api));
            } catch (UnsupportedVersionException e) {
                usable.put(api.name, null);  // the broker does not serve it, or no version in common
            }
        }
        Map<String, Object> finalized = new TreeMap<>();
        data.finalizedFeatures().forEach(f -> finalized.put(f.name(), f.maxVersionLevel()));
        Map<String, Object> supported = new TreeMap<>();
        data.supportedFeatures().forEach(f -> supported.put(f.name(), List.of(f.minVersion(), f.maxVersion())));
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("mode", "versions");
        result.put("error_code", data.errorCode());
        result.put("usable", usable);
        result.put("broker", brokerRange);
        result.put("finalized_features", finalized);
        result.put("supported_features", supported);
        return result;
    }

    // -- consume-transform-produce ----------------------------------------------------------------

    static Map<String, Object> ctp(String bootstrap, String prefix, int count, String groupProtocol) throws Exception {
        String input = prefix + "-in";
        String output = prefix + "-out";
        String group = prefix + "-group";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(input, PARTITIONS, (short) 1), new NewTopic(output, PARTITIONS, (short) 1)))
                    .all().get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        }

        // 1. The input: "0" .. "count-1", keyed by themselves, from an idempotent producer.
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, null))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(input, Integer.toString(i), Integer.toString(i)));
            }
            producer.flush();
        }

        // 2. Consume, transform ("out-" + value), produce, and commit the input offsets in the same
        //    transaction.  The first transaction is aborted after its records reached the log; the
        //    consumer seeks back and the next transaction processes the same input again.
        int committed = 0;
        int aborted = 0;
        int abortedRecords = 0;
        int processed = 0;
        Properties loopConsumer = consumerProps(bootstrap, group, "read_committed");
        loopConsumer.put("max.poll.records", "50");  // several transactions, not one
        loopConsumer.put("group.protocol", groupProtocol);
        int generation = -1;  // the group's generation (classic) or the member's epoch (consumer) the offsets went with
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(loopConsumer);
             KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, prefix + "-txn"))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long deadline = System.nanoTime() + TIMEOUT.toNanos() * 2;
            while (processed < count) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("processed " + processed + " of " + count + " before the deadline");
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<String, String>> batch = records.records(tp);
                    for (ConsumerRecord<String, String> r : batch) {
                        producer.send(new ProducerRecord<>(output, r.key(), "out-" + r.value()));
                    }
                    offsets.put(tp, new OffsetAndMetadata(batch.get(batch.size() - 1).offset() + 1));
                }
                ConsumerGroupMetadata groupMetadata = consumer.groupMetadata();
                generation = groupMetadata.generationId();
                producer.sendOffsetsToTransaction(offsets, groupMetadata);
                if (aborted == 0) {
                    producer.flush();  // the records are in the log before the abort marker
                    producer.abortTransaction();
                    aborted++;
                    abortedRecords += records.count();
                    for (TopicPartition tp : records.partitions()) {
                        consumer.seek(tp, records.records(tp).get(0).offset());
                    }
                    continue;
                }
                producer.commitTransaction();
                committed++;
                processed += records.count();
            }
        }

        // 3. Check: every input exactly once in the committed output, the aborted attempt visible
        //    only to read_uncommitted, and the group's committed offsets at the input's end.
        List<String> values = readAll(bootstrap, output, "read_committed");
        int uncommitted = readAll(bootstrap, output, "read_uncommitted").size();
        Map<String, Integer> seen = new HashMap<>();
        values.forEach(v -> seen.merge(v, 1, Integer::sum));
        int missing = 0;
        for (int i = 0; i < count; i++) {
            if (!seen.containsKey("out-" + i)) {
                missing++;
            }
        }
        long duplicates = seen.values().stream().filter(n -> n > 1).count();
        boolean offsetsAtEnd;
        long groupTotal = 0;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap));
             KafkaConsumer<String, String> probe = new KafkaConsumer<>(consumerProps(bootstrap, null, "read_committed"))) {
            Map<TopicPartition, OffsetAndMetadata> groupOffsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            Map<TopicPartition, Long> ends = probe.endOffsets(partitions(input), TIMEOUT);
            offsetsAtEnd = true;
            for (TopicPartition tp : ends.keySet()) {
                OffsetAndMetadata at = groupOffsets.get(tp);
                offsetsAtEnd &= at != null && at.offset() == ends.get(tp);
                groupTotal += at == null ? 0 : at.offset();
            }
        }

        Map<String, Object> result = new LinkedHashMap<>();
        result.put("mode", "ctp");
        result.put("group_protocol", groupProtocol);
        result.put("group_generation", generation);
        result.put("inputs", count);
        result.put("outputs_committed", values.size());
        result.put("distinct", seen.size());
        result.put("missing", missing);
        result.put("duplicates", duplicates);
        result.put("exactly_once", values.size() == count && missing == 0 && duplicates == 0);
        result.put("committed_transactions", committed);
        result.put("aborted_transactions", aborted);
        result.put("aborted_records", abortedRecords);
        result.put("outputs_read_uncommitted", uncommitted);
        result.put("group_offsets_total", groupTotal);
        result.put("group_offsets_at_input_end", offsetsAtEnd);
        return result;
    }

    // -- KIP-848 ----------------------------------------------------------------------------------

    /** A consumer of the new group protocol subscribes to a topic of three records: it reads them
     *  (the broker serves ConsumerGroupHeartbeat) or fails, and the exception is the result. */
    static Map<String, Object> consumerProtocol(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-cp";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, null))) {
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            }
            producer.flush();
        }
        Properties props = consumerProps(bootstrap, prefix + "-group", "read_committed");
        props.put("group.protocol", "consumer");
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("mode", "consumer-protocol");
        int records = 0;
        Throwable error = null;
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        try {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (records < 3 && System.nanoTime() < deadline) {
                records += consumer.poll(Duration.ofMillis(500)).count();
            }
        } catch (Exception e) {
            error = e;
        } finally {
            try {
                consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
            } catch (Exception e) {
                result.put("close_error_class", e.getClass().getName());
            }
        }
        result.put("records", records);
        result.put("ok", error == null && records == 3);
        List<String> causes = new ArrayList<>();
        for (Throwable t = error; t != null; t = t.getCause()) {
            causes.add(t.getClass().getName());
        }
        result.put("error_class", error == null ? null : error.getClass().getName());
        result.put("error", error == null ? null : String.valueOf(error.getMessage()));
        result.put("causes", causes);
        return result;
    }

    // -- helpers ----------------------------------------------------------------------------------

    /** Every value of the topic, read from the beginning up to the end offsets the isolation level
     *  sees (the last stable offset for read_committed). */
    static List<String> readAll(String bootstrap, String topic, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, null, isolation))) {
            List<TopicPartition> tps = partitions(topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps, TIMEOUT);
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (tps.stream().anyMatch(tp -> consumer.position(tp, TIMEOUT) < ends.get(tp))) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("could not read " + topic + " to " + ends);
                }
                consumer.poll(Duration.ofMillis(200)).forEach(r -> values.add(r.value()));
            }
        }
        return values;
    }

    static List<TopicPartition> partitions(String topic) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        return tps;
    }

    static Properties producerProps(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        props.put("linger.ms", "5");
        if (transactionalId != null) {
            props.put("transactional.id", transactionalId);
            props.put("transaction.timeout.ms", "60000");
        }
        return props;
    }

    static Properties consumerProps(String bootstrap, String group, String isolation) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("isolation.level", isolation);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        if (group != null) {
            props.put("group.id", group);
        }
        return props;
    }

    /** Just enough JSON for the results: maps, lists, strings, numbers, booleans, null. */
    static final class Json {
        static String write(Object value) {
            StringBuilder out = new StringBuilder();
            write(value, out);
            return out.toString();
        }

        private static void write(Object value, StringBuilder out) {
            if (value == null) {
                out.append("null");
            } else if (value instanceof Map<?, ?> map) {
                out.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : map.entrySet()) {
                    out.append(first ? "" : ",");
                    first = false;
                    write(String.valueOf(e.getKey()), out);
                    out.append(':');
                    write(e.getValue(), out);
                }
                out.append('}');
            } else if (value instanceof List<?> list) {
                out.append('[');
                for (int i = 0; i < list.size(); i++) {
                    out.append(i == 0 ? "" : ",");
                    write(list.get(i), out);
                }
                out.append(']');
            } else if (value instanceof Number || value instanceof Boolean) {
                out.append(value);
            } else {
                out.append('"');
                for (char c : value.toString().toCharArray()) {
                    switch (c) {
                        case '"' -> out.append("\\\"");
                        case '\\' -> out.append("\\\\");
                        case '\n' -> out.append("\\n");
                        default -> {
                            if (c < 0x20) {
                                out.append(String.format("\\u%04x", (int) c));
                            } else {
                                out.append(c);
                            }
                        }
                    }
                }
                out.append('"');
            }
        }
    }

    private ClientCheck() {
    }
}
