package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The warm-ups run the real counting paths to their end: an exception inside would be swallowed (counted as an
 * internal error) and the JIT would compile a prefix of the work only, so these check that nothing was counted
 * as an error, malformed or unattributed, for short and long windows.
 */
class JitWarmUpTest {
    private static AuditSettings settings(String windowMs) {
        return AuditSettings.from(Map.of("kafka.audit.window.ms", windowMs), 1_000, 10_000);
    }

    @ParameterizedTest
    @ValueSource(strings = {"1000", "10000", "60000", "3600000"})
    void producerWarmUpRunsCleanly(String windowMs) {
        InterceptorMetrics host = new InterceptorMetrics();
        InterceptorMetrics own =
                JitWarmUp.producerCounting(settings(windowMs), ProducerSettingsReport.of(Map.of()), host);
        assertEquals(0, host.getInternalErrors());
        assertEquals(0, own.getInternalErrors());
        assertEquals(0, own.getUnattributedAcknowledgements(), "every acknowledgement found its window by its stamp");
        assertEquals(0, own.getWindowsDropped());
    }

    @ParameterizedTest
    @ValueSource(strings = {"1000", "10000", "60000", "3600000"})
    void consumerWarmUpRunsCleanly(String windowMs) {
        InterceptorMetrics host = new InterceptorMetrics();
        InterceptorMetrics own = JitWarmUp.consumerCounting(settings(windowMs), host);
        assertEquals(0, host.getInternalErrors());
        assertEquals(0, own.getInternalErrors());
        assertEquals(0, own.getMalformedStamps());
        assertEquals(0, own.getDeadLetters());
    }
}
