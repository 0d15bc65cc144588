//go:build !race

package proxy

func raceAcquireIO() {}
