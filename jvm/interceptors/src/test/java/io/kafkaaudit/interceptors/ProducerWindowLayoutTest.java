package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;
import org.openjdk.jol.info.ClassLayout;
import org.openjdk.jol.info.FieldLayout;

/**
 * What the producer interceptor's two threads write for every record stays on cache lines of their own, in the
 * layout this JVM gives the classes (Java Object Layout): the window's send side ({@code onSend}, the
 * application's thread) at least a cache line from its acknowledgement side ({@code onAcknowledgement}, the I/O
 * thread), and each lock object long enough that two of them never share the line their headers are on.
 */
class ProducerWindowLayoutTest {
    private static final int CACHE_LINE = 64;
    private static final Set<String> SEND_SIDE = Set.of("slot", "sent", "firstSequence", "lastSequence", "lastSendMs",
            "dirty", "state");
    private static final Set<String> ACK_SIDE = Set.of("acknowledged", "failed", "bytes", "acksChanged");

    @Test
    void theSendSideAndTheAcknowledgementSideAreACacheLineApart() {
        Map<String, long[]> fields = new TreeMap<>(); // name -> {offset, end}
        for (FieldLayout f : ClassLayout.parseClass(ProducerWindow.class).fields()) {
            fields.put(f.name(), new long[] {f.offset(), f.offset() + f.size()});
        }
        assertTrue(fields.keySet().containsAll(SEND_SIDE) && fields.keySet().containsAll(ACK_SIDE), fields::toString);
        long sendEnd = SEND_SIDE.stream().mapToLong(n -> fields.get(n)[1]).max().orElseThrow();
        long ackStart = ACK_SIDE.stream().mapToLong(n -> fields.get(n)[0]).min().orElseThrow();
        long sendStart = SEND_SIDE.stream().mapToLong(n -> fields.get(n)[0]).min().orElseThrow();
        long ackEnd = ACK_SIDE.stream().mapToLong(n -> fields.get(n)[1]).max().orElseThrow();
        assertTrue(ackStart - sendEnd >= CACHE_LINE || sendStart - ackEnd >= CACHE_LINE,
                () -> "send side ends at " + sendEnd + ", acknowledgement side starts at " + ackStart + ": "
                        + ClassLayout.parseClass(ProducerWindow.class).toPrintable());
    }

    @Test
    void twoLockObjectsNeverShareTheirHeadersLine() throws ClassNotFoundException {
        ClassLayout lock = ClassLayout.parseClass(Class.forName(ProducerAuditor.class.getName() + "$PaddedLock"));
        assertTrue(lock.instanceSize() >= CACHE_LINE, lock::toPrintable);
    }
}
