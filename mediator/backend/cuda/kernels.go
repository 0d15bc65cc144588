package cuda

// throttlePTX is the THROTTLE command: one thread spinning on %globaltimer
// (the GPU's nanosecond clock) until it has run for ns. It counts only the
// time it ran: a step between two reads longer than gap means the context
// was switched out (time slicing between VMs' contexts), and that time was
// somebody else's. At its end it adds what it ran to its channel's ground
// truth record (host-mapped memory, one writer per channel since a channel's
// commands run in order) and leaves its first and last timer reads:
//
//	rec[0] += ran ns    rec[1] += 1    rec[2] = start    rec[3] = end
//
// PTX (not a cubin) so that the driver compiles it for whichever GPU it
// finds; ISA 7.0 / sm_70 is the oldest that every supported driver takes.
const throttlePTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry sluice_throttle(
	.param .u64 p_rec,
	.param .u64 p_ns,
	.param .u64 p_gap
)
{
	.reg .pred %p<3>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [p_rec];
	ld.param.u64 %rd2, [p_ns];
	ld.param.u64 %rd3, [p_gap];
	mov.u64 %rd4, %globaltimer;
	mov.u64 %rd5, %rd4;
	mov.u64 %rd6, 0;
	setp.eq.u64 %p1, %rd2, 0;
	@%p1 bra DONE;
LOOP:
	mov.u64 %rd7, %globaltimer;
	sub.u64 %rd8, %rd7, %rd5;
	mov.u64 %rd5, %rd7;
	setp.gt.u64 %p2, %rd8, %rd3;
	@%p2 bra LOOP;
	add.u64 %rd6, %rd6, %rd8;
	setp.lt.u64 %p1, %rd6, %rd2;
	@%p1 bra LOOP;
DONE:
	ld.volatile.global.u64 %rd9, [%rd1];
	add.u64 %rd9, %rd9, %rd6;
	st.volatile.global.u64 [%rd1], %rd9;
	ld.volatile.global.u64 %rd10, [%rd1+8];
	add.u64 %rd10, %rd10, 1;
	st.volatile.global.u64 [%rd1+8], %rd10;
	st.volatile.global.u64 [%rd1+16], %rd4;
	st.volatile.global.u64 [%rd1+24], %rd5;
	membar.sys;
	ret;
}
`

// throttleName is the kernel's entry point.
const throttleName = "sluice_throttle"

// throttleArgs packs the kernel's parameters.
func throttleArgs(rec devptr, ns, gap uint64) []byte {
	b := make([]byte, 24)
	le.PutUint64(b[0:], uint64(rec))
	le.PutUint64(b[8:], ns)
	le.PutUint64(b[16:], gap)
	return b
}
