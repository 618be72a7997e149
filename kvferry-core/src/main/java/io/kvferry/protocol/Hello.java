package io.kvferry.protocol;

/**
 * @param authToken  the cluster token ("" when none)
 * @param sessionId  unique id of the decode manager (the per-room key on prefill)
 * @param dataPath   how prefill should move bytes to this peer: "tcp" or "inproc"
 */
public record Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize,
                    int ppRank, int pageSize, String kvCacheDtype, MemoryDescriptor memory) implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.HELLO;
    }
}
