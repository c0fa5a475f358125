package dev.mirrorflow.kafka.read;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;
import org.junit.jupiter.api.Test;

class ConsumerLogsTest {

    /** The consumer's level after {@link ConsumerLogs.Log4j#quiet} in a context whose root
     *  logs at {@code root} and whose {@code configured} logger (if any) at {@code level}. */
    private static Level quieted(Level root, String configured, Level level) {
        ConfigurationBuilder<BuiltConfiguration> builder = ConfigurationBuilderFactory.newConfigurationBuilder();
        builder.add(builder.newRootLogger(root));
        if (configured != null) {
            builder.add(builder.newLogger(configured, level));
        }
        LoggerContext context = new LoggerContext("consumer-logs-test");
        context.start(builder.build());
        try {
            ConsumerLogs.Log4j.quiet(context);
            return context.getLogger(ConsumerLogs.LOGGER).getLevel();
        } finally {
            context.stop();
        }
    }

    @Test
    void aConsumerThatWouldLogAtInfoLogsAtWarn() {
        assertEquals(Level.WARN, quieted(Level.INFO, null, null));
        assertEquals(Level.WARN, quieted(Level.WARN, "org.apache.kafka", Level.INFO));
    }

    @Test
    void aLevelConfiguredForTheConsumerOrMoreVerboseOrQuieterIsKept() {
        assertEquals(Level.INFO, quieted(Level.INFO, ConsumerLogs.LOGGER, Level.INFO));
        assertEquals(Level.DEBUG, quieted(Level.INFO, "org.apache.kafka", Level.DEBUG));
        assertEquals(Level.ERROR, quieted(Level.ERROR, null, null));
    }
}
