package io.kvferry.ucx;

/**
 * Where a registered buffer lives, as carried per buffer in the UCX offer. Only {@link #HOST} is
 * registered today ({@code RegisteredMemory} holds native host segments); the others are reserved
 * so GPU pools can be offered without changing the offer format or the SPI. Wire codes are
 * kvferry's own and stable; {@link #ucsOrdinal} is UCX's {@code ucs_memory_type_t} value.
 */
enum MemoryType {
    HOST(0, 0),
    CUDA(1, 1),
    CUDA_MANAGED(2, 2),
    ROCM(3, 3),
    ROCM_MANAGED(4, 4);

    private final int code;
    private final int ucsOrdinal;

    MemoryType(int code, int ucsOrdinal) {
        this.code = code;
        this.ucsOrdinal = ucsOrdinal;
    }

    int code() {
        return code;
    }

    /** {@code ucs_memory_type_t} (UCS_MEMORY_TYPE_HOST = 0, CUDA = 1, CUDA_MANAGED = 2, ROCM = 3, ROCM_MANAGED = 4). */
    int ucsOrdinal() {
        return ucsOrdinal;
    }

    /** The type with this wire code, or null. */
    static MemoryType fromCode(int code) {
        for (MemoryType t : values()) if (t.code == code) return t;
        return null;
    }
}
