package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// info is what `info` prints.
type info struct {
	VersionMajor  uint16        `json:"version_major"`
	VersionMinor  uint16        `json:"version_minor"`
	Features      uint64        `json:"features"`
	HostPeerID    uint32        `json:"host_peer_id"`
	PeerID        *uint16       `json:"peer_id,omitempty"`
	Epoch         uint64        `json:"epoch"`
	Heartbeat     uint64        `json:"heartbeat"`
	Layout        abi.Layout    `json:"layout"`
	SyscallVector int           `json:"syscall_vector"`
	ControlVector int           `json:"control_vector"`
	Limits        abi.Limits    `json:"limits"`
	Channels      []channelInfo `json:"channels"`
}

type channelInfo struct {
	Index      int    `json:"index"`
	State      string `json:"state"`
	Put        uint32 `json:"put"`
	Get        uint32 `json:"get"`
	Completed  uint64 `json:"completed"`
	Fence      uint64 `json:"fence"`
	Error      string `json:"error,omitempty"`
	ErrorIndex uint32 `json:"error_index,omitempty"`
}

func newInfoCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Print the region's header (layout, host peer id, epoch) and channel states",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.openRegion(cmd.Context()) // a look, which waits for nothing
			if err != nil {
				return err
			}
			defer d.Close()
			in, err := readInfo(d)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.out, in)
			}
			printInfo(g.out, in)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func readInfo(d *sdk.Device) (info, error) {
	h := d.Header()
	ch := int(h.Layout.Channels)
	in := info{
		VersionMajor: h.VersionMajor, VersionMinor: h.VersionMinor, Features: h.Features,
		HostPeerID: h.HostPeerID, Epoch: d.Epoch(), Heartbeat: d.Heartbeat(), Layout: h.Layout,
		SyscallVector: abi.SyscallVector(ch), ControlVector: abi.ControlVector(ch), Limits: h.Limits,
	}
	if id, ok := peerID(d.Transport()); ok {
		in.PeerID = &id
	}
	for i := range ch {
		c, err := d.Channel(i)
		if err != nil {
			return info{}, err
		}
		ci := channelInfo{Index: i, State: c.State().String(), Put: c.Put(), Get: c.Get(), Completed: c.Completed(), Fence: c.Fence()}
		if code, at := c.Err(); code != abi.OK {
			ci.Error, ci.ErrorIndex = code.String(), at
		}
		in.Channels = append(in.Channels, ci)
	}
	return in, nil
}

func printInfo(w io.Writer, in info) {
	l := in.Layout
	fmt.Fprintf(w, "ABI          %d.%d, features %#x\n", in.VersionMajor, in.VersionMinor, in.Features)
	fmt.Fprintf(w, "host peer    %d", in.HostPeerID)
	if in.PeerID != nil {
		fmt.Fprintf(w, " (this peer %d)", *in.PeerID)
	}
	fmt.Fprintf(w, "\nepoch        %d, heartbeat %d\n", in.Epoch, in.Heartbeat)
	fmt.Fprintf(w, "region       %d bytes\n", l.RegionSize)
	fmt.Fprintf(w, "channels     %d at %#x, rings of %d records at %#x\n", l.Channels, l.ChannelsOff, l.RingEntries, l.RingsOff)
	fmt.Fprintf(w, "syscalls     %d slots, %d bytes at %#x\n", l.SyscallSlots, l.SyscallSize, l.SyscallOff)
	fmt.Fprintf(w, "heap         %d bytes at %#x\n", l.HeapSize, l.HeapOff)
	fmt.Fprintf(w, "vectors      channels 0-%d, syscall %d, control %d\n", l.Channels-1, in.SyscallVector, in.ControlVector)
	fmt.Fprintf(w, "limits       throttle %v, alloc %d bytes\n", time.Duration(in.Limits.MaxThrottleNs), in.Limits.MaxAllocSize)
	for _, c := range in.Channels {
		fmt.Fprintf(w, "channel %-4d %s, put %d, get %d, completed %d, fence %d", c.Index, c.State, c.Put, c.Get, c.Completed, c.Fence)
		if c.Error != "" {
			fmt.Fprintf(w, ", error %q at record %d", c.Error, c.ErrorIndex)
		}
		fmt.Fprintln(w)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
