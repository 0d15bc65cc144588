package hostapi

import "fmt"

// The range of a VM's scheduling weight, the same for creating a VM (where
// 0 means the default, 1) and changing it; the daemon checks it with
// CheckWeight, in one place, for the host API and the fleet agent alike.
const (
	MinWeight = 1
	MaxWeight = 1_000_000
)

// CheckWeight refuses a weight outside MinWeight..MaxWeight with ErrInvalid.
func CheckWeight(w uint32) error {
	if w < MinWeight || w > MaxWeight {
		return fmt.Errorf("weight %d: want %d to %d: %w", w, MinWeight, MaxWeight, ErrInvalid)
	}
	return nil
}
