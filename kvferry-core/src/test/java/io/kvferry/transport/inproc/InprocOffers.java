package io.kvferry.transport.inproc;

/** What tests in other packages may read of the inproc transport's JVM-wide state. */
public final class InprocOffers {
    private InprocOffers() {
    }

    /** How many inproc offers this JVM holds: one per decode link set up over inproc and not yet lost or torn down. */
    public static int held() {
        return InprocTransportProvider.offersHeld();
    }
}
