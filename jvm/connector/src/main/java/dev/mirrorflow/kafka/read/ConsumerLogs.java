package dev.mirrorflow.kafka.read;

import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.config.Configuration;
import org.apache.logging.log4j.core.config.LoggerConfig;

/**
 * Keeps the Kafka consumer's per-partition INFO lines out of Spark's logs.
 *
 * <p>Kafka's consumer logs every {@code seek} at INFO ("Seeking to offset ... for partition
 * ...") and every assignment as one line naming all its partitions. A range read seeks each
 * partition it reads, in the mirror and again in the proof: 20,000 lines a run of 10,000
 * partitions, gigabytes a day of a flow run every minute. Where Spark logs through Log4j 2
 * (its own backend) and the consumer's logger would log at INFO, it is set to WARN; a logger
 * configured for it by name, or a more verbose level inherited (DEBUG for
 * {@code org.apache.kafka}, say), is left as it is. Any other logging backend is left alone.
 */
public final class ConsumerLogs {

    /** The logger of Kafka's consumer (the classic protocol's, the one a range read uses). */
    public static final String LOGGER = "org.apache.kafka.clients.consumer.internals.ClassicKafkaConsumer";

    private static final AtomicBoolean QUIETED = new AtomicBoolean();

    private ConsumerLogs() {
    }

    /** Once per JVM: the consumer's logger at WARN where it would log at INFO. */
    public static void quiet() {
        if (!QUIETED.compareAndSet(false, true)) {
            return;
        }
        try {
            Log4j.quiet(LoggerContext.getContext(ConsumerLogs.class.getClassLoader(), false, null));
        } catch (LinkageError | ClassCastException e) {
            // Spark logs through another backend: its configuration decides.
        }
    }

    /** Log4j 2's types, loaded only when it is the backend. */
    static final class Log4j {

        private Log4j() {
        }

        /** The consumer's logger in {@code context} at WARN, where it would log at INFO and
         *  no logger is configured under its name. */
        static void quiet(LoggerContext context) {
            Configuration config = context.getConfiguration();
            LoggerConfig nearest = config.getLoggerConfig(LOGGER);
            if (nearest.getName().equals(LOGGER) || !Level.INFO.equals(nearest.getLevel())) {
                return;
            }
            // No appenders of its own: what it still logs goes to its parent's.
            config.addLogger(LOGGER, LoggerConfig.newBuilder().withLoggerName(LOGGER)
                    .withLevel(Level.WARN).withAdditivity(true).withConfig(config).build());
            context.updateLoggers();
        }
    }
}
