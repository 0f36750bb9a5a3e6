// The Java client's consume-transform-produce loop for the broker's transaction tests:
//   TxnLoop BOOTSTRAP IN OUT GROUP TXN_ID COUNT
// A read_committed consumer in GROUP (subscribe) reads IN; per record one transaction sends
// out-<value> to OUT and the consumer's next offset with sendOffsetsToTransaction, then
// commits. The first transaction is aborted and its record processed again. One JSON object
// per line: {"event":"aborted"|"transformed","offset":..}, then {"event":"done",...}.

import java.time.Duration;
import java.util.Collections;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnLoop {
    private static void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] args) {
        String bootstrap = args[0], in = args[1], outTopic = args[2], group = args[3];
        String txnId = args[4];
        int count = Integer.parseInt(args[5]);
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(Collections.singletonList(in));
            int done = 0;
            boolean abortNext = true;
            long deadline = System.currentTimeMillis() + 120_000;
            while (done < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    producer.beginTransaction();
                    producer.send(new ProducerRecord<>(outTopic, "out-" + r.value()));
                    Map<TopicPartition, OffsetAndMetadata> offsets =
                        Collections.singletonMap(tp, new OffsetAndMetadata(r.offset() + 1));
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    if (abortNext) {
                        abortNext = false;
                        producer.flush();
                        producer.abortTransaction();
                        out("{\"event\":\"aborted\",\"offset\":" + r.offset() + "}");
                        consumer.seek(tp, r.offset());
                        break;
                    }
                    producer.commitTransaction();
                    done++;
                    out("{\"event\":\"transformed\",\"offset\":" + r.offset() + "}");
                }
            }
            OffsetAndMetadata committed =
                consumer.committed(Collections.singleton(new TopicPartition(in, 0)))
                    .get(new TopicPartition(in, 0));
            out("{\"event\":\"committed_offset\",\"offset\":"
                + (committed == null ? -1 : committed.offset()) + "}");
            out("{\"event\":\"done\",\"transformed\":" + done + "}");
        }
    }
}
