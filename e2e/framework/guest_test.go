package framework

import (
	"os"
	"runtime"
	"testing"
)

func TestNamesDir(t *testing.T) {
	dirs := []string{"/tmp/sluice-e2e-1", "/tmp/sluice-e2e-bin-7/"}
	for _, c := range []struct {
		arg  string
		want bool
	}{
		{"/tmp/sluice-e2e-1", true},
		{"/tmp/sluice-e2e-1/guests/a/serial.log", true},
		{"socket,id=c,path=/tmp/sluice-e2e-1/vms/a.sock", true},
		{"-kernel=/tmp/sluice-e2e-bin-7/guest/vmlinuz", true},
		{"file:/tmp/sluice-e2e-1", true},
		{"/tmp/sluice-e2e-12/vms/a.sock", false}, // another suite's
		{"path=/tmp/sluice-e2e-12,x=/tmp/sluice-e2e-1", true},
		{"/tmp/sluice-e2e-bin-70/guest", false},
		{"/var/tmp/sluice-e2e-1", false},
		{"-m", false},
	} {
		if got := namesDir([]string{"qemu-system-x86_64", c.arg}, dirs); got != c.want {
			t.Errorf("namesDir(%q) = %v, want %v", c.arg, got, c.want)
		}
	}
}

func TestProcStat(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	st, ok := procStat(os.Getpid())
	if !ok || st.comm == "" || st.start == "" || st.state == 'Z' {
		t.Fatalf("procStat of this process: %+v, %v", st, ok)
	}
	if again, _ := procStat(os.Getpid()); again.start != st.start {
		t.Errorf("start time moved: %q then %q", st.start, again.start)
	}
	if qemuAlive(os.Getpid()) || zombie(os.Getpid()) {
		t.Error("this process is taken for a QEMU or a zombie")
	}
	if _, ok := procStat(-1); ok {
		t.Error("procStat(-1) succeeded")
	}
}
