package cuda

// throttlePTX is the THROTTLE command: one thread spinning on %globaltimer
// (the GPU's nanosecond clock) until it has run for ns. It counts only the
// time it ran: a step between two reads longer than gap means its context
// was switched out (time slicing between VMs' contexts), and that time was
// somebody else's.
//
// It writes its own start and end markers (seq), each right after the
// timer read it belongs to: the start marker after the first, the end
// marker after the last. So the running state the poller reads is the
// kernel's own span, not the launch's queueing and teardown around it, and
// the markers' span is the span of its record, no store longer on one side
// than on the other (the mediator credits a command from the sweep that
// reads its start to the one that reads its end: an end marker issued after
// more stores than the start marker would bill every kernel their time).
// After the end marker it leaves its record in its slot, seq last, with
// posted stores only (no reads of host memory, which would cost
// microseconds of GPU time that the record does not count; the completer
// waits for the record when it lands after the marker, as it does):
//
//	slot[0] = ran ns    slot[1] = first timer read    slot[2] = last    slot[3] = seq
//
// PTX (not a cubin) so that the driver compiles it for whichever GPU it
// finds; ISA 7.0 / sm_70 is the oldest that every supported driver takes.
const throttlePTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry sluice_throttle(
	.param .u64 p_slot,
	.param .u64 p_ns,
	.param .u64 p_gap,
	.param .u64 p_seq,
	.param .u64 p_start,
	.param .u64 p_end
)
{
	.reg .pred %p<3>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [p_slot];
	ld.param.u64 %rd2, [p_ns];
	ld.param.u64 %rd3, [p_gap];
	ld.param.u64 %rd9, [p_seq];
	ld.param.u64 %rd10, [p_start];
	ld.param.u64 %rd11, [p_end];
	mov.u64 %rd4, %globaltimer;
	st.volatile.global.u64 [%rd10], %rd9;
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
	st.volatile.global.u64 [%rd11], %rd9;
	st.volatile.global.u64 [%rd1], %rd6;
	st.volatile.global.u64 [%rd1+8], %rd4;
	st.volatile.global.u64 [%rd1+16], %rd5;
	st.volatile.global.u64 [%rd1+24], %rd9;
	ret;
}
`

// throttleName is the kernel's entry point.
const throttleName = "sluice_throttle"

// throttleArgsSize is the size of the kernel's packed parameters.
const throttleArgsSize = 48

// throttleArgs packs the kernel's parameters.
func throttleArgs(slot devptr, ns, gap, seq uint64, start, end devptr) []byte {
	b := make([]byte, throttleArgsSize)
	putThrottleArgs(b, slot, ns, gap, seq, start, end)
	return b
}

// putThrottleArgs packs the kernel's parameters into b (throttleArgsSize
// bytes).
func putThrottleArgs(b []byte, slot devptr, ns, gap, seq uint64, start, end devptr) {
	_ = b[throttleArgsSize-1]
	le.PutUint64(b[0:], uint64(slot))
	le.PutUint64(b[8:], ns)
	le.PutUint64(b[16:], gap)
	le.PutUint64(b[24:], seq)
	le.PutUint64(b[32:], uint64(start))
	le.PutUint64(b[40:], uint64(end))
}
