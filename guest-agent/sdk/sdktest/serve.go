package sdktest

import "github.com/sluice-gpu/sluice/api/abi"

// serve runs channel c's new records in order, as the real host's contract
// says: a failing record publishes its error and index, then get moves past
// it and the channel stops until the guest bumps reset.
func (h *Host) serve(c uint32) {
	d := h.layout.ChannelOff(c)
	get := h.r.Load32(d + abi.ChGet) // only this loop writes get
	if reset := h.r.Load32(d + abi.ChReset); reset != h.r.Load32(d+abi.ChResetAck) {
		// Drop what was not forwarded: nothing is in flight here.
		get = h.r.Load32(d + abi.ChPut)
		h.r.Store32(d+abi.ChGet, get)
		h.r.Store32(d+abi.ChError, uint32(abi.OK))
		h.r.Store32(d+abi.ChErrorIndex, 0)
		h.r.Store32(d+abi.ChState, uint32(abi.ChannelIdle))
		h.failed[c] = false
		h.r.Store32(d+abi.ChResetAck, reset)
		h.wakeGuest(c)
	}
	if h.failed[c] {
		return
	}
	put := h.r.Load32(d + abi.ChPut)
	n, code := abi.CheckPut(put, get, get, h.layout.RingEntries)
	if code != abi.OK {
		h.fail(c, code, get)
		h.wakeGuest(c)
		return
	}
	if n > 0 {
		h.r.Store32(d+abi.ChState, uint32(abi.ChannelBusy))
	}
	for range n {
		var rec abi.Record
		h.r.CopyOut(rec[:], h.layout.RecordOff(c, get))
		cmd, code := abi.DecodeCommand(&rec, h.layout, h.cfg.Limits)
		if code == abi.OK {
			code = h.cfg.Handler(c, get, cmd)
		}
		if code != abi.OK {
			h.fail(c, code, get)
			h.r.Store32(d+abi.ChGet, get+1)
			h.wakeGuest(c)
			return
		}
		if cmd.Op == abi.OpFence {
			h.r.Store64(d+abi.ChFence, cmd.Value)
		}
		h.r.Store64(d+abi.ChCompleted, h.r.Load64(d+abi.ChCompleted)+1)
		get++
		h.r.Store32(d+abi.ChGet, get)
		h.wakeGuest(c)
	}
	h.r.Store32(d+abi.ChState, uint32(abi.ChannelIdle))
}

// fail publishes code at record idx; the index goes before the code so a
// guest that reads the code first sees its index.
func (h *Host) fail(c uint32, code abi.ErrorCode, idx uint32) {
	d := h.layout.ChannelOff(c)
	h.r.Store32(d+abi.ChErrorIndex, idx)
	h.r.Store32(d+abi.ChError, uint32(code))
	h.r.Store32(d+abi.ChState, uint32(abi.ChannelFailed))
	h.failed[c] = true
}
