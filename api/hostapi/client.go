package hostapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Client talks to a mediator's host API over its UNIX socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns: 4,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Version asks the daemon who it is.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v Version
	return v, c.do(ctx, http.MethodGet, "/v1/version", nil, &v)
}

// CreateVM creates a VM endpoint.
func (c *Client) CreateVM(ctx context.Context, req CreateVMRequest) (VM, error) {
	var vm VM
	return vm, c.do(ctx, http.MethodPost, "/v1/vms", req, &vm)
}

// ListVMs lists the VMs, sorted by name.
func (c *Client) ListVMs(ctx context.Context) ([]VM, error) {
	var vms []VM
	return vms, c.do(ctx, http.MethodGet, "/v1/vms", nil, &vms)
}

// GetVM describes one VM.
func (c *Client) GetVM(ctx context.Context, name string) (VM, error) {
	var vm VM
	return vm, c.do(ctx, http.MethodGet, "/v1/vms/"+url.PathEscape(name), nil, &vm)
}

// DeleteVM tears a VM's endpoint down. Its usage stays on record.
func (c *Client) DeleteVM(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/vms/"+url.PathEscape(name), nil, nil)
}

// Usage returns a VM's cumulative usage.
func (c *Client) Usage(ctx context.Context, name string) (Usage, error) {
	var u Usage
	return u, c.do(ctx, http.MethodGet, "/v1/vms/"+url.PathEscape(name)+"/usage", nil, &u)
}

// UpdateVM changes a VM's weight or cap; fields left nil stay as they are.
// It returns the VM as changed.
func (c *Client) UpdateVM(ctx context.Context, name string, req UpdateVMRequest) (VM, error) {
	var vm VM
	return vm, c.do(ctx, http.MethodPatch, "/v1/vms/"+url.PathEscape(name), req, &vm)
}

// Policy returns the scheduling policy and the accounting method.
func (c *Client) Policy(ctx context.Context) (PolicyState, error) {
	var p PolicyState
	return p, c.do(ctx, http.MethodGet, "/v1/policy", nil, &p)
}

// SetPolicy switches the scheduling policy (one of the Policy* constants)
// and returns the state in effect afterwards.
func (c *Client) SetPolicy(ctx context.Context, policy string) (PolicyState, error) {
	var p PolicyState
	return p, c.do(ctx, http.MethodPut, "/v1/policy", PolicyState{Policy: policy}, &p)
}

// Stats returns a snapshot of every VM.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	return s, c.do(ctx, http.MethodGet, "/v1/stats", nil, &s)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sluiced"+path, body)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w: %w", method, path, c.socket, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading response to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
		if e.Message == "" { // a status without a standard text
			e.Message = fmt.Sprintf("http status %d", resp.StatusCode)
		}
		return &RemoteError{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding response to %s %s: %w", method, path, err)
	}
	return nil
}

// RemoteError is an error the daemon answered with. It unwraps to the
// sentinel its code maps to, so errors.Is(err, ErrNotFound) works on the
// client as on the server.
type RemoteError struct {
	Status  int
	Code    string
	Message string
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the sentinel error of the code, or nil.
func (e *RemoteError) Unwrap() error { return sentinelOf(e.Code) }
