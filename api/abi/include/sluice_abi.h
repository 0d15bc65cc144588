/*
 * sluice_abi.h - Sluice shared-memory ABI, version 1.1, for guest and GPU code.
 *
 * One power-of-two region per VM, seen by the guest as ivshmem BAR2. Its
 * parts, each page aligned, at the offsets the header announces:
 *
 *   header page   struct sluice_header (256 bytes; the rest of the page is
 *                 reserved)
 *   channels      header.channels x struct sluice_channel (128 bytes each)
 *   rings         header.channels rings of header.ring_entries
 *                 struct sluice_cmd (64 bytes each)
 *   syscall area  a page with the ready bitmap, then header.syscall_slots x
 *                 struct sluice_syscall_slot (1.1, SLUICE_FEATURE_SYSCALLS);
 *                 sluice_syscall.h is the library that uses it
 *   heap          guest-managed bytes that commands name by offset
 *
 * The Go package github.com/sluice-gpu/sluice/api/abi is the source of truth;
 * its abi_c_test.go compiles this header and checks every size, offset and
 * constant against it. All multi-byte fields are little-endian.
 *
 * Submitting work on channel c (the guest owns put, the host owns the rest):
 *   1. wait until put - get < ring_entries (both free-running uint32, the
 *      subtraction wraps);
 *   2. fill *sluice_ring_record(base, hdr, c, put) completely, every unused
 *      (reserved) byte zero;
 *   3. release fence, then store put + 1 into the channel's put;
 *   4. write sluice_doorbell(hdr->host_peer_id, sluice_channel_vector(c)) to
 *      BAR0 offset SLUICE_IVSHMEM_DOORBELL.
 * The host completes records in order, advancing get; a failure stops the
 * channel with error and error_index set and state SLUICE_CHANNEL_FAILED
 * until the guest bumps reset (the host echoes it in reset_ack).
 *
 * Fields the other side writes concurrently (put, get, fence, state, slot
 * state words, ...) must be read and written with atomic or volatile
 * accesses of their natural width; this header only describes the layout.
 *
 * C99 or later, C++11 or later (C++98 works without the static_assert
 * messages). CUDA device code can use the inline helpers.
 */
#ifndef SLUICE_ABI_H
#define SLUICE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Portability
 * ------------------------------------------------------------------------ */

#define SLUICE_CONCAT_(a, b) a##b
#define SLUICE_CONCAT(a, b) SLUICE_CONCAT_(a, b)

/* Compile-time check. C99 and C++98 lack static assertions: GCC and Clang
 * take C11's as an extension, elsewhere a negative array size does the job
 * (one check a line). */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define SLUICE_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define SLUICE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#elif !defined(__cplusplus) && defined(__GNUC__)
#define SLUICE_STATIC_ASSERT(cond, msg) __extension__ _Static_assert(cond, msg)
#else
#define SLUICE_STATIC_ASSERT(cond, msg) \
	typedef char SLUICE_CONCAT(sluice_static_assert_, __LINE__)[(cond) ? 1 : -1]
#endif

/* nvcc defines __CUDACC__, clang -x cuda __CUDA__ (the TU provides __host__
 * and __device__, as the CUDA headers or a kernel's own prelude do). */
#if defined(__CUDACC__) || defined(__CUDA__)
#define SLUICE_INLINE static __inline__ __host__ __device__
#else
#define SLUICE_INLINE static inline
#endif

/* ------------------------------------------------------------------------
 * Identity and geometry
 * ------------------------------------------------------------------------ */

#define SLUICE_MAGIC 0x45434c53u /* "SLCE" as a little-endian uint32 */
#define SLUICE_VERSION_MAJOR 1   /* incompatible changes */
#define SLUICE_VERSION_MINOR 1   /* additions, announced by feature bits */

#define SLUICE_PAGE_SIZE 4096
#define SLUICE_HEADER_SIZE 256
#define SLUICE_CHANNEL_DESC_SIZE 128
#define SLUICE_RECORD_SIZE 64
#define SLUICE_SYSCALL_SLOT_SIZE 64
#define SLUICE_RELOC_SIZE 8

/* Limits on a layout (the host never offers more). */
#define SLUICE_MAX_CHANNELS 64
#define SLUICE_MIN_RING_ENTRIES 8      /* ring_entries is a power of two */
#define SLUICE_MAX_RING_ENTRIES 65536
#define SLUICE_MAX_SYSCALL_SLOTS 4096  /* a multiple of 64 */
#define SLUICE_MIN_REGION_SIZE UINT64_C(0x10000)     /* 64 KiB */
#define SLUICE_MAX_REGION_SIZE UINT64_C(0x400000000) /* 16 GiB */

/* Limits on commands. */
#define SLUICE_MAX_HANDLE 0x100000u  /* handles are 1..SLUICE_MAX_HANDLE */
#define SLUICE_MAX_RELOCS 64         /* relocations per LAUNCH */
#define SLUICE_MAX_KERNEL_NAME 1024  /* bytes of a LAUNCH kernel name */
#define SLUICE_MAX_ARGS_LEN 4096     /* bytes of a LAUNCH argument blob */
#define SLUICE_MAX_GRID 0x7fffffffu  /* largest LAUNCH grid dimension */
#define SLUICE_MAX_BLOCK 1024u       /* largest LAUNCH block dimension */

/* ivshmem BAR0 register a guest writes its doorbells to. */
#define SLUICE_IVSHMEM_DOORBELL 12

/* ------------------------------------------------------------------------
 * Header (offset 0)
 * ------------------------------------------------------------------------ */

/* Feature bits in sluice_header.features. */
#define SLUICE_FEATURE_SYSCALLS UINT64_C(0x1)    /* the syscall area is served */
#define SLUICE_FEATURE_READY_MAP UINT64_C(0x2)   /* the host scans the ready map (hint bytes), the state words now and then */
#define SLUICE_FEATURE_RESULT_WORD UINT64_C(0x4) /* a FINISHED slot holds its errno at SLUICE_SYS_FIN_ERRNO too */
#define SLUICE_FEATURE_SYSCALL_RING UINT64_C(0x8) /* the host consumes the request ring after the slots */
#define SLUICE_FEATURE_WAKE UINT64_C(0x10)        /* the host signals a guest that armed a channel's wake word */
#define SLUICE_FEATURE_POLLING UINT64_C(0x20)     /* host_polling is non-zero while the host polls every put */

/* Byte offsets of the header's fields. */
#define SLUICE_HDR_MAGIC 0
#define SLUICE_HDR_VERSION_MAJOR 4
#define SLUICE_HDR_VERSION_MINOR 6
#define SLUICE_HDR_FEATURES 8
#define SLUICE_HDR_HOST_PEER_ID 16
#define SLUICE_HDR_CHANNELS 20
#define SLUICE_HDR_RING_ENTRIES 24
#define SLUICE_HDR_SYSCALL_SLOTS 28
#define SLUICE_HDR_REGION_SIZE 32
#define SLUICE_HDR_CHANNELS_OFF 40
#define SLUICE_HDR_RINGS_OFF 48
#define SLUICE_HDR_SYSCALL_OFF 56
#define SLUICE_HDR_SYSCALL_SIZE 64
#define SLUICE_HDR_HEAP_OFF 72
#define SLUICE_HDR_HEAP_SIZE 80
#define SLUICE_HDR_EPOCH 88
#define SLUICE_HDR_HEARTBEAT 96
#define SLUICE_HDR_SYSCALL_VECTOR 104
#define SLUICE_HDR_CONTROL_VECTOR 108
#define SLUICE_HDR_MAX_THROTTLE_NS 112
#define SLUICE_HDR_MAX_ALLOC_SIZE 120
#define SLUICE_HDR_POLLING 128

/*
 * Written by the host when the endpoint is created; afterwards only epoch
 * (changes when the mediator restarts), heartbeat (advances periodically),
 * max_throttle_ns and host_polling change. A guest checks magic,
 * version_major, region_size against its mapping and the offsets against the
 * geometry before trusting any of it.
 */
struct sluice_header {
	uint32_t magic;           /* SLUICE_MAGIC */
	uint16_t version_major;   /* SLUICE_VERSION_MAJOR */
	uint16_t version_minor;
	uint64_t features;        /* SLUICE_FEATURE_* */
	uint32_t host_peer_id;    /* ivshmem peer id of the host, < 65536 */
	uint32_t channels;        /* 1..SLUICE_MAX_CHANNELS */
	uint32_t ring_entries;    /* records per ring, a power of two */
	uint32_t syscall_slots;   /* 0 when there is no syscall area */
	uint64_t region_size;     /* bytes, a power of two */
	uint64_t channels_off;    /* struct sluice_channel[channels] */
	uint64_t rings_off;       /* channels rings of ring_entries records */
	uint64_t syscall_off;     /* ready bitmap page, then the slots */
	uint64_t syscall_size;    /* 0 when there is no syscall area */
	uint64_t heap_off;
	uint64_t heap_size;
	uint64_t epoch;           /* changes when the mediator restarts */
	uint64_t heartbeat;       /* advances while the mediator is alive */
	uint32_t syscall_vector;  /* == channels */
	uint32_t control_vector;  /* == channels + 1 */
	uint64_t max_throttle_ns; /* longest THROTTLE the host accepts: the VM's longest
	                           * command, past which any command fails with
	                           * SLUICE_ETIMEDOUT (the operator may change it) */
	uint64_t max_alloc_size;  /* largest single ALLOC the host accepts */
	/*
	 * SLUICE_FEATURE_POLLING: non-zero while the host busy-polls every
	 * channel's put. A guest that stores put and then reads it non-zero
	 * (both sequentially consistent: a store followed by a full fence,
	 * then the load) may leave out the doorbell; the host clears it and
	 * then looks at every put once more before it stops polling.
	 */
	uint32_t host_polling;
	uint8_t reserved[124];    /* zero */
};

/* ------------------------------------------------------------------------
 * Channel descriptors (header.channels_off + c * 128)
 * ------------------------------------------------------------------------ */

/* Byte offsets within a descriptor. */
#define SLUICE_CH_PUT 0
#define SLUICE_CH_RESET 4
#define SLUICE_CH_WAKE 8
#define SLUICE_CH_GET 64
#define SLUICE_CH_ERROR 68
#define SLUICE_CH_ERROR_INDEX 72
#define SLUICE_CH_RESET_ACK 76
#define SLUICE_CH_FENCE 80
#define SLUICE_CH_COMPLETED 88
#define SLUICE_CH_STATE 96

/*
 * sluice_channel.wake (SLUICE_FEATURE_WAKE): 0 while the guest polls; a guest
 * about to sleep on its own ivshmem eventfd for the channel's vector stores
 * sluice_wake_word(its peer id, the index of the record it waits for) with a
 * sequentially consistent store, reads get and error once more, and only
 * then sleeps; awake, it stores 0 before it looks again. After publishing
 * get or an error the host loads the word (sequentially consistent) and, if
 * it is armed and get has passed the index (int32_t)(get - index) > 0 or the
 * channel failed, clears SLUICE_WAKE_ARMED by compare-and-swap and signals
 * vector c of that peer: one signal per sleep, none while the guest polls.
 * To wait for any progress, name the index before the last get seen.
 */
#define SLUICE_WAKE_ARMED UINT64_C(0x80000000)  /* the guest sleeps: signal it */
#define SLUICE_WAKE_PEER_MASK UINT64_C(0xffff)  /* the ivshmem peer id to signal */
#define SLUICE_WAKE_INDEX_SHIFT 32              /* upper half: the index waited for */

/* sluice_channel.state */
#define SLUICE_CHANNEL_IDLE 0   /* nothing in flight */
#define SLUICE_CHANNEL_BUSY 1   /* commands forwarded to the GPU */
#define SLUICE_CHANNEL_HELD 2   /* doorbells latched by the scheduler */
#define SLUICE_CHANNEL_FAILED 3 /* stopped at error until the guest resets */

/*
 * Two cache lines: the first written only by the guest, the second only by
 * the host, so the two sides never contend for a line (one exception: the
 * host clears SLUICE_WAKE_ARMED in wake when it signals a sleeping guest).
 */
struct sluice_channel {
	/* Guest-owned. */
	uint32_t put;         /* free-running index of the next record to write */
	uint32_t reset;       /* bump to ask the host to clear a channel error */
	uint64_t wake;        /* 0, or sluice_wake_word() while the guest sleeps */
	uint8_t guest_reserved[48];

	/* Host-owned. */
	uint32_t get;         /* free-running index of the next record to complete */
	uint32_t error;       /* SLUICE_E* of the first failed record, 0 if none */
	uint32_t error_index; /* free-running index of that record */
	uint32_t reset_ack;   /* the last reset value the host acted on */
	uint64_t fence;       /* value of the last FENCE completed */
	uint64_t completed;   /* records completed since the channel was made */
	uint32_t state;       /* SLUICE_CHANNEL_* */
	uint8_t host_reserved[28];
};

/* Channel error codes (sluice_channel.error). */
#define SLUICE_OK 0
#define SLUICE_EBADOPCODE 1    /* unknown opcode (0 is never valid) */
#define SLUICE_EBADRECORD 2    /* reserved bits or bytes set, or a field out of range */
#define SLUICE_ERINGOVERFLOW 3 /* put more than ring_entries ahead of get, or behind */
#define SLUICE_EHEAPRANGE 4    /* a heap offset or length reaches outside the heap */
#define SLUICE_EBADHANDLE 5    /* no buffer or module with that handle, or one reused */
#define SLUICE_ENOMEMORY 6     /* the device or the VM's quota has no room */
#define SLUICE_EUNSUPPORTED 7  /* the backend does not implement this command */
#define SLUICE_EDEVICE 8       /* the device failed the command */
#define SLUICE_EBUFFERRANGE 9  /* an offset or length reaches outside a device buffer */
#define SLUICE_ETOOLONG 10     /* a throttle longer than max_throttle_ns */
#define SLUICE_ESHUTDOWN 11    /* the channel or VM is being torn down */
#define SLUICE_ETIMEDOUT 12    /* a command ran past max_throttle_ns: the VM's GPU work was ended */

/* ------------------------------------------------------------------------
 * Command records (header.rings_off + (c * ring_entries + i) * 64)
 * ------------------------------------------------------------------------ */

/* Opcodes. Zero is never valid, so a zeroed slot fails instead of running. */
#define SLUICE_OP_NOP 1
#define SLUICE_OP_FENCE 2       /* publish value in the channel's fence */
#define SLUICE_OP_THROTTLE 3    /* spin the GPU for ns nanoseconds */
#define SLUICE_OP_MEMSET 4
#define SLUICE_OP_COPY 5
#define SLUICE_OP_ALLOC 6       /* handle is chosen by the guest */
#define SLUICE_OP_FREE 7
#define SLUICE_OP_LOAD_MODULE 8 /* handle (a module) is chosen by the guest */
#define SLUICE_OP_LAUNCH 9

/* sluice_cmd.flags */
#define SLUICE_FLAG_INTERRUPT 0x1 /* signal the channel's vector on completion */

/* sluice_cmd_copy.dir */
#define SLUICE_COPY_HOST_TO_DEVICE 1   /* heap -> buffer handle */
#define SLUICE_COPY_DEVICE_TO_HOST 2   /* buffer handle -> heap */
#define SLUICE_COPY_DEVICE_TO_DEVICE 3 /* buffer src_handle -> buffer handle */

/* sluice_cmd_load_module.format */
#define SLUICE_MODULE_PTX 1   /* PTX text, compiled for the GPU by the host */
#define SLUICE_MODULE_CUBIN 2 /* an ELF cubin for the host's GPU; a fatbin is SLUICE_EUNSUPPORTED */
#define SLUICE_MODULE_SIM 3 /* 1.1: the sim backend's built-in programs (image SLUICE_SIM_MODULE_IMAGE) */

/* sluice_reloc.kind */
#define SLUICE_RELOC_BUFFER 1 /* the u64 at arg_offset is a buffer handle: becomes its device address */
#define SLUICE_RELOC_HEAP 2   /* the u64 at arg_offset is a heap offset: becomes its device address */
#define SLUICE_RELOC_SYSCALL 3 /* 1.1: the u64 at arg_offset is 0: becomes the syscall area's device address */
#define SLUICE_RELOC_SYSCALL_RING 4 /* SLUICE_FEATURE_SYSCALL_RING: the u64 is 0: becomes the ring's claim counter */

/* Byte offsets within a record. Every record starts with opcode, flags and
 * handle; the rest is the opcode's payload. Bytes a payload does not use,
 * and the handle of an opcode that takes none, must be zero. */
#define SLUICE_REC_OPCODE 0
#define SLUICE_REC_FLAGS 2
#define SLUICE_REC_HANDLE 4
#define SLUICE_REC_ARG0 8

#define SLUICE_FENCE_VALUE 8
#define SLUICE_THROTTLE_NS 8
#define SLUICE_MEMSET_OFFSET 8
#define SLUICE_MEMSET_LENGTH 16
#define SLUICE_MEMSET_VALUE 24
#define SLUICE_COPY_DIR 8
#define SLUICE_COPY_SRC_HANDLE 12
#define SLUICE_COPY_OFFSET 16
#define SLUICE_COPY_HEAP_OFF 24
#define SLUICE_COPY_LENGTH 32
#define SLUICE_ALLOC_SIZE 8
#define SLUICE_MOD_FORMAT 8
#define SLUICE_MOD_HEAP_OFF 16
#define SLUICE_MOD_LENGTH 24
#define SLUICE_LAUNCH_GRID 8
#define SLUICE_LAUNCH_BLOCK 20
#define SLUICE_LAUNCH_SHARED_MEM 32
#define SLUICE_LAUNCH_NAME_LEN 36
#define SLUICE_LAUNCH_NAME_OFF 40
#define SLUICE_LAUNCH_ARGS_OFF 48
#define SLUICE_LAUNCH_ARGS_LEN 56
#define SLUICE_LAUNCH_RELOCS 60

/* Per-opcode payloads: 56 bytes each, starting at record offset 8. */
struct sluice_cmd_fence {
	uint64_t value;
	uint8_t reserved[48];
};

struct sluice_cmd_throttle {
	uint64_t ns; /* <= header.max_throttle_ns */
	uint8_t reserved[48];
};

/* handle: the buffer. */
struct sluice_cmd_memset {
	uint64_t offset;
	uint64_t length;
	uint32_t value; /* the byte to write, 0..255 */
	uint8_t reserved[36];
};

/* handle: the destination buffer, or the buffer read for device to host. */
struct sluice_cmd_copy {
	uint32_t dir;        /* SLUICE_COPY_* */
	uint32_t src_handle; /* device to device only, else 0 */
	uint64_t offset;     /* in the buffer handle */
	uint64_t heap_off;   /* in the heap; device to device: in src_handle */
	uint64_t length;
	uint8_t reserved[24];
};

/* handle: the new buffer. */
struct sluice_cmd_alloc {
	uint64_t size; /* 1..header.max_alloc_size */
	uint8_t reserved[48];
};

/* handle: the new module. */
struct sluice_cmd_load_module {
	uint32_t format; /* SLUICE_MODULE_* */
	uint32_t reserved0;
	uint64_t heap_off; /* the image, length > 0 bytes in the heap */
	uint64_t length;
	uint8_t reserved[32];
};

/*
 * handle: the module. The kernel's name (name_len bytes, no NUL) lies at
 * name_off in the heap; the argument blob at args_off: args_len bytes of
 * arguments, zero padding to a multiple of 8, then relocs struct sluice_reloc
 * (see sluice_launch_blob_size).
 */
struct sluice_cmd_launch {
	uint32_t grid[3];   /* each 1..SLUICE_MAX_GRID */
	uint32_t block[3];  /* each 1..SLUICE_MAX_BLOCK */
	uint32_t shared_mem; /* dynamic shared memory bytes */
	uint32_t name_len;  /* 1..SLUICE_MAX_KERNEL_NAME */
	uint64_t name_off;
	uint64_t args_off;
	uint32_t args_len;  /* 0..SLUICE_MAX_ARGS_LEN */
	uint32_t relocs;    /* 0..SLUICE_MAX_RELOCS */
};

struct sluice_cmd {
	uint16_t opcode; /* SLUICE_OP_* */
	uint16_t flags;  /* SLUICE_FLAG_* */
	uint32_t handle; /* buffer or module, 1..SLUICE_MAX_HANDLE; 0 if unused */
	union {
		struct sluice_cmd_fence fence;
		struct sluice_cmd_throttle throttle;
		struct sluice_cmd_memset memset;
		struct sluice_cmd_copy copy;
		struct sluice_cmd_alloc alloc;
		struct sluice_cmd_load_module load_module;
		struct sluice_cmd_launch launch;
		uint8_t raw[56];
	} u;
};

/* One relocation in a LAUNCH argument blob. */
struct sluice_reloc {
	uint32_t arg_offset; /* byte offset of a u64 within the arguments */
	uint32_t kind;       /* SLUICE_RELOC_* */
};

/* ------------------------------------------------------------------------
 * Syscall area (1.1, SLUICE_FEATURE_SYSCALLS; header.syscall_off)
 * ------------------------------------------------------------------------ */

/* The area starts with a page holding the ready map (SLUICE_FEATURE_READY_MAP):
 * byte i is slot i's ready hint, which a guest sets (any nonzero value, a
 * plain store) after it stored READY. The host scans the map; for a set byte
 * it clears the byte, then reads the slot's state word (it sets the byte
 * again while the state is still POPULATING: the hint may land first), and
 * it still scans every state word now and then: hints are only hints, and a
 * guest that sets none is served, later. (Before the ready map the page held
 * a bitmap, bit i of uint64_t word i / 64, that no host read.) The slots
 * follow. Offsets are relative to header.syscall_off. */
#define SLUICE_SYSCALL_BITMAP_OFF 0    /* the page before the slots */
#define SLUICE_SYSCALL_READY_MAP_OFF 0 /* one hint byte per slot */
#define SLUICE_SYSCALL_SLOTS_OFF 4096

/* Byte offsets within a slot. */
#define SLUICE_SYS_STATE 0
#define SLUICE_SYS_NUMBER 4  /* u16 */
#define SLUICE_SYS_FLAGS 6   /* u8 SLUICE_SYS_FLAG_* */
#define SLUICE_SYS_CONTEXT 7 /* u8 */
#define SLUICE_SYS_ARGS 8
#define SLUICE_SYS_RET 8     /* i64 return value (args[0]), written by the host */
#define SLUICE_SYS_ERRNO 16  /* u64 errno (args[1]), written by the host */
#define SLUICE_SYS_FIN_ERRNO 4 /* u32 errno of a FINISHED slot (SLUICE_FEATURE_RESULT_WORD): bytes 0..7 are
                                * stored at once, FINISHED|s and the errno, after ret and args[1] */
#define SLUICE_SYS_COOKIE 56
#define SLUICE_SYS_ARG_COUNT 6

/* sluice_syscall_slot.flags */
#define SLUICE_SYS_FLAG_BLOCKING 0x1u /* the caller waits for FINISHED and the result */
#define SLUICE_SYS_FLAG_FASTCALL 0x2u /* number is a fastcall number */

/* Guest contexts: ids 1..SLUICE_MAX_CONTEXTS; 0 is the VM's default. */
#define SLUICE_MAX_CONTEXTS 255

/* The state word: the slot's state in the low 8 bits, a sequence number in
 * the high 24 bits. The sequence changes whenever a slot is reused, so a
 * stale completion is told apart from the current one (ABA). */
#define SLUICE_SLOT_STATE_BITS 8
#define SLUICE_SLOT_STATE_MASK 0xffu
#define SLUICE_SLOT_SEQ_SHIFT 8
#define SLUICE_SLOT_SEQ_MASK 0xffffffu /* after shifting right */

/* Slot states: FREE -> POPULATING -> READY -> PROCESSING -> FINISHED -> FREE.
 *
 * The caller moves a slot FREE|s -> POPULATING|s by compare-and-swap, writes
 * number, flags, context and args, and stores READY|s with release ordering
 * (on a GPU: a system-scope fence first). The host copies the slot out and
 * takes it (READY|s -> PROCESSING|s); nothing written afterwards reaches the
 * call. A blocking call ends with args[0] (return value) and args[1] (errno),
 * then FINISHED|s; the caller reads them and frees the slot with FREE|s+1. A
 * non-blocking call is freed by the host (READY|s -> FREE|s+1) right after
 * the copy, its result discarded. */
#define SLUICE_SLOT_FREE 0       /* owned by the guest, unused */
#define SLUICE_SLOT_POPULATING 1 /* the guest is writing the arguments */
#define SLUICE_SLOT_READY 2      /* complete; the host may take it */
#define SLUICE_SLOT_PROCESSING 3 /* the host copied it out and serves it */
#define SLUICE_SLOT_FINISHED 4   /* the result is in args[0] (value) and args[1] (errno) */

/* The request ring (SLUICE_FEATURE_SYSCALL_RING) follows the slots: as
 * many entries as slots, entry pos % slots for position pos. A caller holding
 * slot i (FREE|s) stores PROCESSING|s and bytes 4..7 (number, flags,
 * context) into it, claims pos by fetch-and-add on the VM's claim counter
 * (device memory on a GPU: SLUICE_RELOC_SYSCALL_RING), writes bytes 4..63 of
 * the entry and stores tag = pos + 1 with release ordering. The host reads
 * the entries in order and serves each as a call taken from slot|seq; the
 * result comes in the slot as for a slot call (a non-blocking call's slot is
 * freed, FREE|s+1, once its entry is read). The caller holds its slot until
 * then, so the ring never laps the host. */
#define SLUICE_SYSCALL_RING_ENTRY_SIZE 64
#define SLUICE_SYSCALL_RING_HOLE_NS 50000000 /* a claimed entry not written this long, later ones ready: skipped */
#define SLUICE_RING_TAG 0
#define SLUICE_RING_NUMBER 4
#define SLUICE_RING_FLAGS 6
#define SLUICE_RING_CONTEXT 7
#define SLUICE_RING_ARGS 8
#define SLUICE_RING_SLOT 56
#define SLUICE_RING_SEQ 60

struct sluice_syscall_ring_entry {
	uint32_t tag;     /* pos + 1, stored last (release) */
	uint16_t number;  /* as in the slot */
	uint8_t flags;
	uint8_t context;
	uint64_t args[6];
	uint32_t slot;    /* the caller's slot: where the result goes */
	uint32_t seq;     /* the slot's sequence number for this call */
};

struct sluice_syscall_slot {
	uint32_t state;   /* state | sequence << 8 */
	uint16_t number;  /* SLUICE_SYS_* call, or a fastcall number with SLUICE_SYS_FLAG_FASTCALL */
	uint8_t flags;    /* SLUICE_SYS_FLAG_* */
	uint8_t context;  /* guest context of the call, 0: the VM's default */
	uint64_t args[6]; /* arguments; the host writes ret into args[0], errno into args[1] */
	uint64_t cookie;  /* the guest's own; never interpreted by the host */
};

/* Call numbers: Linux's x86-64 numbers, Sluice's own from 0x400. Pointer
 * arguments are heap offsets (the host checks them against the heap). */
#define SLUICE_SYS_READ 0
#define SLUICE_SYS_WRITE 1
#define SLUICE_SYS_CLOSE 3
#define SLUICE_SYS_FSTAT 5
#define SLUICE_SYS_LSEEK 8
#define SLUICE_SYS_MMAP 9
#define SLUICE_SYS_MUNMAP 11
#define SLUICE_SYS_PREAD64 17
#define SLUICE_SYS_PWRITE64 18
#define SLUICE_SYS_MADVISE 28
#define SLUICE_SYS_SOCKET 41
#define SLUICE_SYS_CONNECT 42
#define SLUICE_SYS_SENDTO 44
#define SLUICE_SYS_RECVFROM 45
#define SLUICE_SYS_GETRUSAGE 98
#define SLUICE_SYS_GETDENTS64 217
#define SLUICE_SYS_CLOCK_GETTIME 228
#define SLUICE_SYS_OPENAT 257
#define SLUICE_SYS_MKDIRAT 258
#define SLUICE_SYS_UNLINKAT 263
#define SLUICE_SYS_NULL 0x400                 /* does nothing, returns 0: the round trip alone */
#define SLUICE_SYS_CONTEXT_REGISTER 0x401     /* (uid, gid, umask, cwd path) -> context id 1..255 */
#define SLUICE_SYS_CONTEXT_UNREGISTER 0x402   /* (id): closes the context's files */
#define SLUICE_SYS_FASTCALL_REGISTER 0x403    /* (op, fd, heap off, length, file off) -> fastcall number */
#define SLUICE_SYS_FASTCALL_REVOKE 0x404      /* (number): later uses fail with ESTALE */

/* How a call reads each argument (for tools that place arguments). */
#define SLUICE_ARG_NONE 0     /* unused, ignored by the host */
#define SLUICE_ARG_INT 1      /* a plain integer */
#define SLUICE_ARG_PATH 2     /* heap offset of a NUL-terminated path */
#define SLUICE_ARG_BUF 3      /* heap offset of a buffer whose length is another argument */
#define SLUICE_ARG_HEAP_OUT 4 /* heap offset of a struct the call writes */

/* A path argument is at most SLUICE_PATH_MAX bytes with its NUL. */
#define SLUICE_PATH_MAX 4096

/* Fastcall numbers: the low SLUICE_FASTCALL_INDEX_BITS bits index the VM's
 * fastcall table, the high bits are the entry's generation. */
#define SLUICE_FASTCALL_INDEX_BITS 10
#define SLUICE_MAX_FASTCALLS 1024
#define SLUICE_FASTCALL_GEN_MASK 0x3fu

/* Errnos (Linux's) the host writes into args[1]; a call returns any errno
 * of its host call, these are the ones the syscall path itself produces. */
#define SLUICE_ERRNO_PERM 1
#define SLUICE_ERRNO_NOENT 2
#define SLUICE_ERRNO_SRCH 3         /* no such guest context */
#define SLUICE_ERRNO_IO 5           /* the VM's proxy died while serving the call */
#define SLUICE_ERRNO_BADF 9
#define SLUICE_ERRNO_AGAIN 11
#define SLUICE_ERRNO_NOMEM 12
#define SLUICE_ERRNO_ACCES 13
#define SLUICE_ERRNO_FAULT 14       /* a heap offset or length outside the heap */
#define SLUICE_ERRNO_EXIST 17
#define SLUICE_ERRNO_XDEV 18
#define SLUICE_ERRNO_NOTDIR 20
#define SLUICE_ERRNO_INVAL 22
#define SLUICE_ERRNO_MFILE 24
#define SLUICE_ERRNO_NAMETOOLONG 36
#define SLUICE_ERRNO_NOSYS 38       /* not a call of this ABI */
#define SLUICE_ERRNO_LOOP 40
#define SLUICE_ERRNO_STALE 116      /* a revoked fastcall */

/* ------------------------------------------------------------------------
 * GPU programs (1.1): the kernels of guest-agent/kernels (PTX) and the sim
 * backend's built-ins (SLUICE_MODULE_SIM) take these argument blobs
 * ------------------------------------------------------------------------ */

#define SLUICE_SIM_MODULE_IMAGE "sluice-sim"

/* Byte offsets of struct sluice_prog_args, the start of every blob. */
#define SLUICE_PROG_SYS 0
#define SLUICE_PROG_OUT 8
#define SLUICE_PROG_FIRST_SLOT 16
#define SLUICE_PROG_SLOTS 20
#define SLUICE_PROG_GRANULARITY 24
#define SLUICE_PROG_ORDERING 25
#define SLUICE_PROG_CONTEXT 26
#define SLUICE_PROG_FLAGS 27
#define SLUICE_PROG_ITERATIONS 28
#define SLUICE_PROG_SPECIFIC 32
#define SLUICE_PROG_ARGS_BASE_SIZE 32

/* sluice_prog_args.granularity: which work-items call (GENESYS 4.1). */
#define SLUICE_PROG_WORK_ITEM 0  /* every work-item */
#define SLUICE_PROG_WORK_GROUP 1 /* work-item 0 of each work-group */
#define SLUICE_PROG_KERNEL 2     /* work-item 0 of work-group 0 (always relaxed) */

/* sluice_prog_args.ordering (work-group granularity). */
#define SLUICE_PROG_STRONG 0  /* barriers before and after the call: the group's writes first, the group waits */
#define SLUICE_PROG_RELAXED 1 /* no barriers: the other work-items go on */
/* Option bits of sluice_prog_args.ordering. */
#define SLUICE_PROG_OWN_SLOTS 0x80u  /* the callers own their slots: no sharing (nslots >= callers), no lock */
#define SLUICE_PROG_ORDER_MASK 0x7fu /* the ordering less the option bits */

struct sluice_prog_args {
	uint64_t sys;         /* SLUICE_RELOC_SYSCALL: the syscall area */
	uint64_t out;         /* SLUICE_RELOC_HEAP: where the program writes its results */
	uint32_t first_slot;  /* the launch uses slots [first_slot, first_slot + nslots) */
	uint32_t nslots;
	uint8_t granularity;  /* SLUICE_PROG_WORK_ITEM, _WORK_GROUP or _KERNEL */
	uint8_t ordering;     /* SLUICE_PROG_STRONG or _RELAXED */
	uint8_t context;      /* the guest context of every call */
	uint8_t flags;        /* slot flags (blocking is implied where a result is used) */
	uint32_t iterations;  /* calls (or passes) per caller */
};

/* sluice_sys_one: one call by one caller; out: i64 ret, u64 errno. */
#define SLUICE_KERNEL_SYS_ONE "sluice_sys_one"
#define SLUICE_SYS_ONE_NUMBER 32
#define SLUICE_SYS_ONE_ARGS 40
#define SLUICE_SYS_ONE_BLOB_SIZE 88
#define SLUICE_SYS_ONE_OUT_SIZE 16

struct sluice_sys_one_args {
	struct sluice_prog_args prog;
	uint32_t number;  /* call (or fastcall) number, < 65536 */
	uint32_t pad;     /* zero */
	uint64_t args[6];
};

/* sluice_sys_null: iterations null calls per caller; out: u32 round-trip ns
 * per call at out[caller * iterations + i]. With a blob of the base alone
 * (SLUICE_NULL_BLOB_SIZE_SLOTS) the calls go through the slots. */
#define SLUICE_KERNEL_SYS_NULL "sluice_sys_null"
#define SLUICE_NULL_OUT_PER_CALL 4
#define SLUICE_NULL_RING 32       /* u64 0 with SLUICE_RELOC_SYSCALL_RING: the calls go through the ring */
#define SLUICE_NULL_RING_SLOTS 40 /* u32 the area's slot count (the ring's length) */
#define SLUICE_NULL_BLOB_SIZE_SLOTS 32 /* a blob of the base alone: the calls go through the slots */
#define SLUICE_NULL_BLOB_SIZE 48

struct sluice_sys_null_args {
	struct sluice_prog_args prog;
	uint64_t ring;       /* 0, or the ring's claim counter (SLUICE_RELOC_SYSCALL_RING) */
	uint32_t ring_slots; /* with ring: the area's slot count */
	uint32_t pad;        /* zero */
};

/* sluice_pread_sweep: the callers pread a file chunk by chunk; out per
 * caller: u64 bytes read, u64 failed calls, u64 sum of the bytes read. */
#define SLUICE_KERNEL_PREAD_SWEEP "sluice_pread_sweep"
#define SLUICE_SWEEP_FD 32
#define SLUICE_SWEEP_BUF 40
#define SLUICE_SWEEP_CHUNK 48
#define SLUICE_SWEEP_FILE_SIZE 56
#define SLUICE_SWEEP_HEAP 64
#define SLUICE_SWEEP_BLOB_SIZE 72
#define SLUICE_SWEEP_OUT_PER_CALL 24

struct sluice_sweep_args {
	struct sluice_prog_args prog;
	uint32_t fd;        /* in the context */
	uint32_t pad;       /* zero */
	uint64_t buf;       /* heap offset of the callers' buffers, chunk bytes each */
	uint64_t chunk;     /* bytes per pread */
	uint64_t file_size; /* bytes to sweep */
	uint64_t heap;      /* SLUICE_RELOC_HEAP of heap offset 0: where the kernel reads buf */
};

/* sluice_wordcount: work-group g counts the words of files g, g + groups,
 * ...; out per work-group: u64 words, u64 bytes, u64 errno of the first
 * failure. */
#define SLUICE_KERNEL_WORD_COUNT "sluice_wordcount"
#define SLUICE_WC_PATHS 32
#define SLUICE_WC_NUM_PATHS 40
#define SLUICE_WC_BUF 48
#define SLUICE_WC_CHUNK 56
#define SLUICE_WC_HEAP 64
#define SLUICE_WC_BLOB_SIZE 72
#define SLUICE_WC_OUT_PER_GROUP 24

struct sluice_wc_args {
	struct sluice_prog_args prog;
	uint64_t paths;  /* heap offset of npaths NUL-terminated paths, back to back */
	uint32_t npaths;
	uint32_t pad;    /* zero */
	uint64_t buf;    /* heap offset of the groups' buffers, chunk bytes each */
	uint64_t chunk;  /* bytes per pread */
	uint64_t heap;   /* SLUICE_RELOC_HEAP of heap offset 0: where the kernel reads paths and buf */
};

/* ------------------------------------------------------------------------
 * Layout checks
 * ------------------------------------------------------------------------ */

SLUICE_STATIC_ASSERT(sizeof(struct sluice_header) == SLUICE_HEADER_SIZE, "sluice_header size");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_header, max_alloc_size) == SLUICE_HDR_MAX_ALLOC_SIZE, "sluice_header layout");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_channel) == SLUICE_CHANNEL_DESC_SIZE, "sluice_channel size");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_channel, get) == SLUICE_CH_GET, "sluice_channel host line");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_channel, state) == SLUICE_CH_STATE, "sluice_channel layout");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_fence) == 56, "sluice_cmd_fence size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_throttle) == 56, "sluice_cmd_throttle size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_memset) == 56, "sluice_cmd_memset size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_copy) == 56, "sluice_cmd_copy size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_alloc) == 56, "sluice_cmd_alloc size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_load_module) == 56, "sluice_cmd_load_module size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd_launch) == 56, "sluice_cmd_launch size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_cmd) == SLUICE_RECORD_SIZE, "sluice_cmd size");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_cmd, u) == SLUICE_REC_ARG0, "sluice_cmd payload offset");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_reloc) == SLUICE_RELOC_SIZE, "sluice_reloc size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_syscall_slot) == SLUICE_SYSCALL_SLOT_SIZE, "sluice_syscall_slot size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_syscall_ring_entry) == SLUICE_SYSCALL_RING_ENTRY_SIZE,
                     "sluice_syscall_ring_entry size");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_syscall_slot, cookie) == SLUICE_SYS_COOKIE, "sluice_syscall_slot layout");
SLUICE_STATIC_ASSERT(offsetof(struct sluice_syscall_slot, context) == SLUICE_SYS_CONTEXT, "sluice_syscall_slot layout");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_prog_args) == SLUICE_PROG_ARGS_BASE_SIZE, "sluice_prog_args size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_sys_one_args) == SLUICE_SYS_ONE_BLOB_SIZE, "sluice_sys_one_args size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_sweep_args) == SLUICE_SWEEP_BLOB_SIZE, "sluice_sweep_args size");
SLUICE_STATIC_ASSERT(sizeof(struct sluice_wc_args) == SLUICE_WC_BLOB_SIZE, "sluice_wc_args size");

/* ------------------------------------------------------------------------
 * Helpers for guests. They trust hdr: check it once after mapping (magic,
 * version, region size, offsets) and keep a private copy.
 * ------------------------------------------------------------------------ */

/* Doorbell vectors: channel c rings vector c; the syscall area and control
 * ring the two after the channels. */
SLUICE_INLINE uint32_t sluice_channel_vector(uint32_t c) { return c; }
SLUICE_INLINE uint32_t sluice_syscall_vector(uint32_t channels) { return channels; }
SLUICE_INLINE uint32_t sluice_control_vector(uint32_t channels) { return channels + 1; }

/* The value to write to BAR0 offset SLUICE_IVSHMEM_DOORBELL to ring vector
 * of the host peer. */
SLUICE_INLINE uint32_t sluice_doorbell(uint32_t host_peer_id, uint32_t vector)
{
	return (host_peer_id << 16) | (vector & 0xffffu);
}

/* The wake word of a guest, ivshmem peer peer, that sleeps until the record
 * with free-running index index completes (SLUICE_FEATURE_WAKE). */
SLUICE_INLINE uint64_t sluice_wake_word(uint32_t peer, uint32_t index)
{
	return ((uint64_t)index << SLUICE_WAKE_INDEX_SHIFT) | SLUICE_WAKE_ARMED | (uint64_t)(peer & 0xffffu);
}

/* Channel c's descriptor in the region mapped at base. */
SLUICE_INLINE struct sluice_channel *sluice_channel_desc(void *base, const struct sluice_header *hdr, uint32_t c)
{
	return (struct sluice_channel *)((uint8_t *)base + hdr->channels_off +
	                                 (uint64_t)c * SLUICE_CHANNEL_DESC_SIZE);
}

/* Byte offset of the record the free-running index i names in channel c's
 * ring (ring_entries is a power of two, so the index wraps with a mask). */
SLUICE_INLINE uint64_t sluice_record_off(const struct sluice_header *hdr, uint32_t c, uint32_t i)
{
	return hdr->rings_off +
	       ((uint64_t)c * hdr->ring_entries + (i & (hdr->ring_entries - 1))) * SLUICE_RECORD_SIZE;
}

/* The record the free-running index i names in channel c's ring. */
SLUICE_INLINE struct sluice_cmd *sluice_ring_record(void *base, const struct sluice_header *hdr, uint32_t c, uint32_t i)
{
	return (struct sluice_cmd *)((uint8_t *)base + sluice_record_off(hdr, c, i));
}

/* Records the guest may still write before the ring is full. */
SLUICE_INLINE uint32_t sluice_ring_space(uint32_t put, uint32_t get, uint32_t ring_entries)
{
	uint32_t used = put - get; /* free-running: wraps */
	return used >= ring_entries ? 0 : ring_entries - used;
}

/* Heap bytes a LAUNCH argument blob spans: the arguments padded to 8, then
 * the relocations. */
SLUICE_INLINE uint64_t sluice_launch_blob_size(uint32_t args_len, uint32_t relocs)
{
	return (((uint64_t)args_len + 7) & ~(uint64_t)7) + (uint64_t)relocs * SLUICE_RELOC_SIZE;
}

/* Syscall slot i, and the ready bitmap, in the region mapped at base. */
SLUICE_INLINE struct sluice_syscall_slot *sluice_syscall_slot_at(void *base, const struct sluice_header *hdr, uint32_t i)
{
	return (struct sluice_syscall_slot *)((uint8_t *)base + hdr->syscall_off + SLUICE_SYSCALL_SLOTS_OFF +
	                                      (uint64_t)i * SLUICE_SYSCALL_SLOT_SIZE);
}

/* The request ring's offset in an area of slots slots (relative to
 * header.syscall_off), and its entry for position pos. */
SLUICE_INLINE uint64_t sluice_syscall_ring_off(uint32_t slots)
{
	return SLUICE_SYSCALL_SLOTS_OFF + (uint64_t)slots * SLUICE_SYSCALL_SLOT_SIZE;
}

SLUICE_INLINE struct sluice_syscall_ring_entry *sluice_syscall_ring_entry_in(void *sys, uint32_t slots, uint64_t pos)
{
	return (struct sluice_syscall_ring_entry *)((uint8_t *)sys + sluice_syscall_ring_off(slots) +
	                                            pos % slots * SLUICE_SYSCALL_RING_ENTRY_SIZE);
}

SLUICE_INLINE uint64_t *sluice_syscall_bitmap(void *base, const struct sluice_header *hdr)
{
	return (uint64_t *)((uint8_t *)base + hdr->syscall_off + SLUICE_SYSCALL_BITMAP_OFF);
}

SLUICE_INLINE uint8_t *sluice_syscall_ready_map(void *base, const struct sluice_header *hdr)
{
	return (uint8_t *)base + hdr->syscall_off + SLUICE_SYSCALL_READY_MAP_OFF;
}

/* Slot state words. */
SLUICE_INLINE uint32_t sluice_slot_word(uint32_t state, uint32_t seq)
{
	return ((seq & SLUICE_SLOT_SEQ_MASK) << SLUICE_SLOT_SEQ_SHIFT) | (state & SLUICE_SLOT_STATE_MASK);
}
SLUICE_INLINE uint32_t sluice_slot_state(uint32_t word) { return word & SLUICE_SLOT_STATE_MASK; }
SLUICE_INLINE uint32_t sluice_slot_seq(uint32_t word) { return word >> SLUICE_SLOT_SEQ_SHIFT; }
SLUICE_INLINE uint32_t sluice_next_seq(uint32_t seq) { return (seq + 1) & SLUICE_SLOT_SEQ_MASK; }

/* Fastcall numbers: an index into the VM's table and its generation. */
SLUICE_INLINE uint16_t sluice_fastcall_number(uint32_t index, uint32_t gen)
{
	return (uint16_t)(((gen & SLUICE_FASTCALL_GEN_MASK) << SLUICE_FASTCALL_INDEX_BITS) |
	                  (index & (SLUICE_MAX_FASTCALLS - 1)));
}
SLUICE_INLINE uint32_t sluice_fastcall_index(uint16_t n) { return (uint32_t)n & (SLUICE_MAX_FASTCALLS - 1); }
SLUICE_INLINE uint32_t sluice_fastcall_gen(uint16_t n) { return (uint32_t)n >> SLUICE_FASTCALL_INDEX_BITS; }

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_ABI_H */
