package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/kcand/kcand/sdk"
)

// ManagerOptions configure the plugin manager.
type ManagerOptions struct {
	// Dir holds the plugin binaries.
	Dir string
	// Pins maps a binary's file name to its expected hex sha256. When nil,
	// Dir/SHA256SUMS is read if present; a binary without a pin is pinned
	// to the digest it has when first discovered, so a restart never runs a
	// replaced binary.
	Pins map[string]string
	// Logger receives the manager's and (named per plugin) the plugins' logs.
	Logger hclog.Logger
	// StartTimeout bounds a plugin's start up to its handshake (default 10 s).
	StartTimeout time.Duration
	// CallTimeout bounds every call to a plugin (default 60 s). A plugin that
	// does not answer in time is treated as hung: killed and restarted.
	CallTimeout time.Duration
	// RestartBackoff is the first delay before restarting a dead plugin,
	// doubled after each failed start up to MaxRestartBackoff (defaults
	// 50 ms and 5 s).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// Env adds variables to each plugin's environment.
	Env []string
}

func (o *ManagerOptions) defaults() {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 60 * time.Second
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = 50 * time.Millisecond
	}
	if o.MaxRestartBackoff <= 0 {
		o.MaxRestartBackoff = 5 * time.Second
	}
}

// Refusal records a plugin binary the manager would not run, and why.
type Refusal struct {
	Name string
	Path string
	Err  error
}

// Manager finds, verifies, starts, watches and restarts plugin processes.
type Manager struct {
	opts    ManagerOptions
	logger  hclog.Logger
	plugins []*Plugin
	refused []Refusal
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// StartManager discovers the plugins in opts.Dir and starts each. A binary
// that fails verification or its handshake is refused (see Refused); the
// others run. It fails only when the directory itself is unusable.
func StartManager(ctx context.Context, opts ManagerOptions) (*Manager, error) {
	opts.defaults()
	bins, err := discover(opts.Dir)
	if err != nil {
		return nil, err
	}
	pins := opts.Pins
	if pins == nil {
		if pins, err = readSums(filepath.Join(opts.Dir, SumsFile)); err != nil {
			return nil, err
		}
	}
	m := &Manager{opts: opts, logger: opts.Logger.Named("plugins"), stop: make(chan struct{})}
	type started struct {
		p   *Plugin
		err error
	}
	results := make([]started, len(bins))
	var wg sync.WaitGroup
	for i, bin := range bins {
		if want, ok := pins[bin.name]; ok && want != bin.digest {
			results[i].err = &ChecksumError{Plugin: bin.name, Path: bin.path, Want: want, Got: bin.digest}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &Plugin{m: m, bin: bin, logger: opts.Logger.Named(bin.name)}
			results[i] = started{p: p, err: p.start(ctx)}
		}()
	}
	wg.Wait()
	names := map[string]string{}
	for i, r := range results {
		if r.err == nil {
			if other, dup := names[r.p.desc.Name]; dup {
				r.p.kill()
				r.err = fmt.Errorf("plugin %s calls itself %q, as %s already does", bins[i].name, r.p.desc.Name, other)
			} else {
				names[r.p.desc.Name] = bins[i].name
			}
		}
		if r.err != nil {
			m.logger.Error("plugin refused", "plugin", bins[i].name, "error", r.err)
			m.refused = append(m.refused, Refusal{Name: bins[i].name, Path: bins[i].path, Err: r.err})
			continue
		}
		m.plugins = append(m.plugins, r.p)
	}
	for _, p := range m.plugins {
		m.wg.Add(1)
		go p.watch()
	}
	return m, nil
}

// Plugins returns the running (or restarting) plugins, sorted by name.
func (m *Manager) Plugins() []*Plugin { return m.plugins }

// Refused returns the binaries that were not started, with the reasons.
func (m *Manager) Refused() []Refusal { return m.refused }

// Lookup returns the plugin that describes itself as name.
func (m *Manager) Lookup(name string) (*Plugin, bool) {
	for _, p := range m.plugins {
		if p.Name() == name {
			return p, true
		}
	}
	return nil, false
}

// Close stops watching and kills every plugin process, waiting for each to exit.
func (m *Manager) Close() error {
	m.once.Do(func() {
		close(m.stop)
		m.wg.Wait()
		var wg sync.WaitGroup
		for _, p := range m.plugins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.shutdown()
			}()
		}
		wg.Wait()
	})
	return nil
}

// pluginState is where a plugin is in its life.
type pluginState int

const (
	stateRunning pluginState = iota
	stateRestarting
	stateStopped
)

// Plugin is one plugin binary under management. Its methods are safe for
// concurrent use; Client returns a view that implements sdk.Plugin and
// survives restarts.
type Plugin struct {
	m      *Manager
	bin    binary
	logger hclog.Logger

	mu         sync.Mutex
	client     *plugin.Client
	rpc        sdk.Plugin
	desc       sdk.Description
	state      pluginState
	generation uint64
	restarts   int
	lastErr    error
	startTook  time.Duration // launch to description, first start
	ready      chan struct{} // closed when a restart ends
	wake       chan struct{} // nudges the watcher
}

// Name is the name the plugin gives itself.
func (p *Plugin) Name() string { return p.desc.Name }

// Path is the plugin binary's path.
func (p *Plugin) Path() string { return p.bin.path }

// Digest is the hex sha256 the binary is pinned to.
func (p *Plugin) Digest() string { return p.bin.digest }

// Description is what the plugin said about itself at its first start.
func (p *Plugin) Description() sdk.Description { return p.desc }

// Health summarises the plugin's state for listings.
type Health struct {
	Running    bool
	Generation uint64
	Restarts   int
	PID        int
	LastError  string
	// StartTook is the first start's time from launching the process to
	// holding its candidate list (checksum of the binary, process start,
	// handshake, TLS, Describe).
	StartTook time.Duration
}

// Health reports the plugin's state.
func (p *Plugin) Health() Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := Health{Running: p.state == stateRunning && !p.client.Exited(), Generation: p.generation, Restarts: p.restarts, StartTook: p.startTook}
	if rc := p.client.ReattachConfig(); rc != nil && rc.Pid > 0 {
		h.PID = rc.Pid
	}
	if p.lastErr != nil {
		h.LastError = p.lastErr.Error()
	}
	return h
}

// start launches the process, handshakes and asks for its description.
func (p *Plugin) start(ctx context.Context) error {
	began := time.Now()
	client, rpc, err := p.launch()
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.m.opts.CallTimeout)
	defer cancel()
	desc, err := rpc.Describe(callCtx)
	if err != nil {
		client.Kill()
		return fmt.Errorf("plugin %s: describe: %w", p.bin.name, err)
	}
	if desc.ProtocolVersion != sdk.ProtocolVersion {
		client.Kill()
		return &ProtocolVersionError{Plugin: p.bin.name, PluginVersion: fmt.Sprint(desc.ProtocolVersion), HostVersions: []int{sdk.ProtocolVersion}, Detail: "described itself so"}
	}
	if err := sdk.ValidateDescription(desc); err != nil {
		client.Kill()
		return fmt.Errorf("plugin %s: bad description: %w", p.bin.name, err)
	}
	took := time.Since(began)
	p.mu.Lock()
	p.client, p.rpc, p.desc, p.state, p.generation = client, rpc, desc, stateRunning, 1
	p.wake = make(chan struct{}, 1)
	p.startTook = took
	p.mu.Unlock()
	p.logger.Info("plugin started", "path", p.bin.path, "version", desc.Version, "candidates", len(desc.Candidates), "pid", pidOf(client),
		"start_ms", float64(took.Microseconds())/1e3)
	return nil
}

var pluginVersionRE = regexp.MustCompile(`Plugin version: (\d+)`)

// launch starts the process with the pinned checksum and AutoMTLS, and
// dispenses the kernels client.
func (p *Plugin) launch() (*plugin.Client, sdk.Plugin, error) {
	digest, err := hex.DecodeString(p.bin.digest)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(p.bin.path)
	cmd.Env = append(cmd.Environ(), p.m.opts.Env...)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdk.PluginSets(nil),
		Cmd:              cmd,
		SecureConfig:     &plugin.SecureConfig{Checksum: digest, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.m.opts.StartTimeout,
		Logger:           p.logger,
	})
	rpcClient, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, nil, p.classifyStartError(err)
	}
	raw, err := rpcClient.Dispense(sdk.PluginName)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("plugin %s: dispense %q: %w", p.bin.name, sdk.PluginName, err)
	}
	rpc, ok := raw.(sdk.Plugin)
	if !ok {
		client.Kill()
		return nil, nil, fmt.Errorf("plugin %s: dispensed %T, not a kcand plugin", p.bin.name, raw)
	}
	return client, rpc, nil
}

func (p *Plugin) classifyStartError(err error) error {
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		got, herr := fileDigest(p.bin.path)
		if herr != nil {
			got = "unreadable: " + herr.Error()
		}
		return &ChecksumError{Plugin: p.bin.name, Path: p.bin.path, Want: p.bin.digest, Got: got}
	}
	if m := pluginVersionRE.FindStringSubmatch(err.Error()); m != nil {
		return &ProtocolVersionError{Plugin: p.bin.name, PluginVersion: m[1], HostVersions: []int{sdk.ProtocolVersion}, Detail: err.Error()}
	}
	return fmt.Errorf("plugin %s: start: %w", p.bin.name, err)
}

// watch restarts the plugin whenever its process exits, with exponential
// backoff between failed starts, until the manager stops.
func (p *Plugin) watch() {
	defer p.m.wg.Done()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	backoff := p.m.opts.RestartBackoff
	for {
		select {
		case <-p.m.stop:
			return
		case <-tick.C:
		case <-p.wake:
		}
		p.mu.Lock()
		dead := p.state == stateRunning && p.client.Exited()
		if dead {
			p.state = stateRestarting
			p.ready = make(chan struct{})
		}
		p.mu.Unlock()
		if !dead {
			continue
		}
		p.logger.Warn("plugin exited; restarting", "backoff", backoff)
		for !p.restart() {
			select {
			case <-p.m.stop:
				p.mu.Lock()
				p.state = stateStopped
				close(p.ready)
				p.mu.Unlock()
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, p.m.opts.MaxRestartBackoff)
		}
		backoff = p.m.opts.RestartBackoff
	}
}

// restart starts a new process, refusing a binary whose digest changed.
func (p *Plugin) restart() bool {
	client, rpc, err := p.launch()
	if err != nil {
		p.logger.Error("plugin restart failed", "error", err)
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		return false
	}
	p.mu.Lock()
	p.client, p.rpc, p.state = client, rpc, stateRunning
	p.generation++
	p.restarts++
	close(p.ready)
	p.mu.Unlock()
	p.logger.Info("plugin restarted", "generation", p.generation, "pid", pidOf(client))
	return true
}

// current returns the live RPC client and its generation, waiting while the
// plugin restarts.
func (p *Plugin) current(ctx context.Context) (sdk.Plugin, uint64, error) {
	for {
		p.mu.Lock()
		state, rpc, gen, ready, client := p.state, p.rpc, p.generation, p.ready, p.client
		p.mu.Unlock()
		switch state {
		case stateStopped:
			return nil, 0, fmt.Errorf("%w: plugin %s is stopped", sdk.ErrUnavailable, p.bin.name)
		case stateRestarting:
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return nil, 0, fmt.Errorf("%w: plugin %s is restarting: %w", sdk.ErrUnavailable, p.bin.name, ctx.Err())
			}
		}
		if client.Exited() {
			p.nudge()
			select {
			case <-time.After(5 * time.Millisecond):
				continue
			case <-ctx.Done():
				return nil, 0, fmt.Errorf("%w: plugin %s exited: %w", sdk.ErrUnavailable, p.bin.name, ctx.Err())
			}
		}
		return rpc, gen, nil
	}
}

// exited reports whether the current process has exited.
func (p *Plugin) exited() bool {
	p.mu.Lock()
	client := p.client
	p.mu.Unlock()
	return client.Exited()
}

// Generation counts the plugin's starts; state prepared in one generation
// is gone in the next.
func (p *Plugin) Generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.generation
}

func (p *Plugin) nudge() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// kill force-stops the current process of a generation (a hung plugin); the
// watcher restarts it.
func (p *Plugin) killGeneration(gen uint64, why string) {
	p.mu.Lock()
	client, current := p.client, p.generation
	p.mu.Unlock()
	if gen != current {
		return
	}
	p.logger.Error("killing plugin", "reason", why, "pid", pidOf(client))
	client.Kill()
	p.nudge()
}

func (p *Plugin) kill() {
	p.mu.Lock()
	client := p.client
	p.mu.Unlock()
	if client != nil {
		client.Kill()
	}
}

func (p *Plugin) shutdown() {
	p.mu.Lock()
	p.state = stateStopped
	client := p.client
	p.mu.Unlock()
	client.Kill()
}

func pidOf(c *plugin.Client) int {
	if rc := c.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// sortedNames lists map keys in order, for stable messages.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
