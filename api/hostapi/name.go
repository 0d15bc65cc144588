package hostapi

import "regexp"

// NameRE is the form of a VM name: 1 to 63 letters, digits, '.', '_' and
// '-', starting with a letter or digit. Names become file names (endpoint
// sockets, guests' run directories), so the rule keeps them safe as one path
// component.
var NameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// ValidName reports whether name is a valid VM name.
func ValidName(name string) bool { return NameRE.MatchString(name) }
