package backend

import (
	"fmt"
	"sort"
	"sync"
)

// Options configure a backend at Open. Keys are backend specific; a backend
// rejects keys it does not know with ErrInvalid.
type Options struct {
	// Clock is "wall" (real time) or "virtual" (a simulated timeline, where
	// the backend supports one).
	Clock  string
	Params map[string]string
}

// Factory opens a backend.
type Factory func(Options) (Backend, error)

var (
	mu        sync.Mutex
	factories = map[string]Factory{}
)

// Register makes a backend available by name. It panics on a duplicate, as
// registration happens in init functions.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("backend: duplicate registration of " + name)
	}
	factories[name] = f
}

// Open opens the backend registered as name.
func Open(name string, opts Options) (Backend, error) {
	mu.Lock()
	f, ok := factories[name]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("opening backend %q: %w (have %v)", name, ErrUnknownBackend, Names())
	}
	b, err := f(opts)
	if err != nil {
		return nil, fmt.Errorf("opening backend %q: %w", name, err)
	}
	return b, nil
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
