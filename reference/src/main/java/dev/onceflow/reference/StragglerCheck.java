package dev.onceflow.reference;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * A transactional producer of the Java client, two transactions, paused while the second is open so
 * that a test can deliver requests of the first again (the stragglers of KAFKA-17754, through the
 * proxy of tests/support/tcp_proxy.py; tests/reference/test_straggler_proxy.py).  Against a broker
 * that finalizes transaction.version 2 the client uses transactions v2.
 *
 * <pre>
 *   StragglerCheck BOOTSTRAP TOPIC TRANSACTIONAL_ID
 * </pre>
 *
 * <ol>
 *   <li>initTransactions; transaction 1: "t1-0", "t1-1", "t1-2" to partition 0, committed;</li>
 *   <li>transaction 2: "t2-0", "t2-1" to partition 0, flushed (in the log, not committed); prints
 *       {"step":"t2-written"} and reads a line from stdin;</li>
 *   <li>"commit" commits transaction 2, anything else aborts it; prints
 *       {"mode":"straggler","t2_end":"committed"|"aborted"|the exception's class,...} and exits 0.</li>
 * </ol>
 * Each line on stdout is one JSON object; a failure before the end prints {"mode","error_class","error"}
 * and exits 1.
 */
public final class StragglerCheck {
    public static void main(String[] args) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("mode", "straggler");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(ClientCheck.producerProps(args[0], args[2]))) {
            String topic = args[1];
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "t1-" + i));
            }
            producer.commitTransaction();

            producer.beginTransaction();
            for (int i = 0; i < 2; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "t2-" + i));
            }
            producer.flush();
            System.out.println("{\"step\":\"t2-written\"}");
            System.out.flush();
            String command = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            try {
                if ("commit".equals(command)) {
                    producer.commitTransaction();
                    result.put("t2_end", "committed");
                } else {
                    producer.abortTransaction();
                    result.put("t2_end", "aborted");
                }
            } catch (Exception e) {
                result.put("t2_end", e.getClass().getName());
                result.put("error", String.valueOf(e.getMessage()));
            }
        } catch (Exception e) {
            result.put("error_class", e.getClass().getName());
            result.put("error", String.valueOf(e.getMessage()));
            System.out.println(ClientCheck.Json.write(result));
            System.exit(1);
            return;
        }
        result.put("client_version", AppInfoParser.getVersion());
        System.out.println(ClientCheck.Json.write(result));
        System.exit(0);  // client threads must not keep the JVM alive
    }

    private StragglerCheck() {
    }
}
