// The Java Kafka client (org.apache.kafka:kafka-clients 4.x) for the broker's tests, with the
// same commands and JSON-lines output as tests/clients/confluent_client.py:
//   produce BOOTSTRAP TOPIC COUNT [--wave K] [--pace-ms MS] [--size BYTES] [--prefix P]
//   consume BOOTSTRAP TOPIC COUNT [--timeout S]
// The consumer has no group id: it assigns every partition and seeks to the beginning.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class OncelogClient {
    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] argv) throws Exception {
        String command = argv[0], bootstrap = argv[1], topic = argv[2];
        int count = Integer.parseInt(argv[3]);
        int wave = 0, paceMs = 0, size = 0;
        double timeout = 60;
        String prefix = "m";
        for (int i = 4; i < argv.length; i += 2) {
            switch (argv[i]) {
                case "--wave": wave = Integer.parseInt(argv[i + 1]); break;
                case "--pace-ms": paceMs = Integer.parseInt(argv[i + 1]); break;
                case "--size": size = Integer.parseInt(argv[i + 1]); break;
                case "--prefix": prefix = argv[i + 1]; break;
                case "--timeout": timeout = Double.parseDouble(argv[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        if (command.equals("produce")) {
            produce(bootstrap, topic, count, wave, paceMs, size, prefix);
        } else {
            consume(bootstrap, topic, count, timeout);
        }
    }

    private static void produce(String bootstrap, String topic, int count, int wave, int paceMs,
                                int size, String prefix) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.RETRIES_CONFIG, Integer.toString(Integer.MAX_VALUE));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "1");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        AtomicInteger delivered = new AtomicInteger(), failed = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                StringBuilder value = new StringBuilder(prefix + "-" + i);
                while (value.length() < size) value.append('.');
                final int n = i;
                producer.send(new ProducerRecord<>(topic, value.toString().getBytes()), (meta, err) -> {
                    if (err != null) {
                        failed.incrementAndGet();
                        out("{\"event\":\"failed\",\"i\":" + n + ",\"error\":" + quote(err.toString()) + "}");
                    } else {
                        delivered.incrementAndGet();
                        out("{\"event\":\"delivered\",\"i\":" + n + ",\"partition\":" + meta.partition()
                            + ",\"offset\":" + meta.offset() + "}");
                    }
                });
                if (wave > 0 && (i + 1) % wave == 0) {
                    producer.flush();
                    if (paceMs > 0) Thread.sleep(paceMs);
                }
            }
            producer.flush();
        }
        out("{\"event\":\"done\",\"delivered\":" + delivered.get() + ",\"failed\":" + failed.get()
            + ",\"unflushed\":0}");
    }

    private static void consume(String bootstrap, String topic, int count, double timeout) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        int consumed = 0;
        long deadline = System.currentTimeMillis() + (long) (timeout * 1000);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            while (consumed < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    consumed++;
                    String value = new String(r.value()).replaceAll("\\.+$", "");
                    out("{\"event\":\"consumed\",\"partition\":" + r.partition() + ",\"offset\":"
                        + r.offset() + ",\"value\":" + quote(value) + "}");
                }
            }
        }
        out("{\"event\":\"done\",\"consumed\":" + consumed + "}");
    }
}
