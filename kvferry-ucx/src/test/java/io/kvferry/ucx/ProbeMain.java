package io.kvferry.ucx;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.List;

/** Child JVM of {@link UcxMissingLibraryTest}: prints what the provider says when UCX cannot load. */
public final class ProbeMain {
    public static void main(String[] args) throws Exception {
        UcxTransportProvider p = new UcxTransportProvider();
        System.out.println("REASON=" + p.unavailableReason(KVFerrySettings.fromEnvironment()));
        KVArgs a = new KVArgs();
        a.addKvBuffer(Arena.global().allocate(4096), 1024);
        RegisteredMemory m = RegisteredMemory.from(a);
        List<String> why = new ArrayList<>();
        System.out.println("DESTINATION=" + p.openDestination(m, 0, KVFerrySettings.fromEnvironment(), null, why::add) + " WHY=" + why);
        try {
            p.openSource(m, 0, KVFerrySettings.fromEnvironment());
            System.out.println("SOURCE=opened");
        } catch (IOException e) {
            System.out.println("SOURCE=IOException " + e.getMessage());
        }
    }
}
