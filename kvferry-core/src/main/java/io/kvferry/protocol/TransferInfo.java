package io.kvferry.protocol;

/**
 * Where one request's KV goes on one decode rank.
 *
 * @param dstKvIndices       destination page ids in token order (after the decode prefix)
 * @param auxIndex           destination metadata row, -1 for none
 * @param stateIndices       destination indices per state component (empty array: none)
 * @param requiredDstInfoNum how many decode ranks' infos the prefill rank must collect for this room
 * @param decodePrefixLen    tokens decode already holds
 * @param dummy              a placeholder destination: nothing is written, only the status is sent
 */
public record TransferInfo(long room, int[] dstKvIndices, int auxIndex, int[][] stateIndices,
                           int requiredDstInfoNum, int decodePrefixLen, boolean dummy) implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.TRANSFER_INFO;
    }
}
