package cuda

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/kcand/kcand/sdk/errdefs"
)

// NVRTCLibraryEnv names the environment variable that points at libnvrtc
// when it is not on the loader's path.
const NVRTCLibraryEnv = "KCAND_LIBNVRTC"

// defaultNVRTCLibraries are tried in order: newest first through the
// loader's path, then the toolkit's usual home.
var defaultNVRTCLibraries = []string{
	"libnvrtc.so.13",
	"libnvrtc.so.12",
	"libnvrtc.so.11.2",
	"libnvrtc.so",
	"/usr/local/cuda/lib64/libnvrtc.so.13",
	"/usr/local/cuda/lib64/libnvrtc.so.12",
	"/usr/local/cuda/lib64/libnvrtc.so",
}

// nvrtcResult is an nvrtcResult.
type nvrtcResult int

// nvrtcNotLoaded is NVRTC_ERROR_INVALID_INPUT, what the C layer returns
// before the library is loaded.
const nvrtcNotLoaded nvrtcResult = 3

// ImageFormat is the kind of module image NVRTC produced.
type ImageFormat string

// Image formats.
const (
	// FormatCUBIN is machine code for one architecture; loads without JIT.
	FormatCUBIN ImageFormat = "cubin"
	// FormatPTX is virtual assembly the driver compiles at load time; used
	// when NVRTC cannot emit a cubin for the GPU (it predates the GPU, or
	// lacks nvrtcGetCUBIN).
	FormatPTX ImageFormat = "ptx"
)

// Target is the GPU architecture to compile for.
type Target struct {
	Major, Minor int
	// ArchSpecific compiles for sm_XYa, which unlocks instructions that run
	// on exactly this architecture (Hopper's wgmma, setmaxnreg). It needs
	// NVRTC 12.0 or newer.
	ArchSpecific bool
}

// String formats the target as NVRTC's real architecture name, "sm_90a".
func (t Target) String() string {
	s := fmt.Sprintf("sm_%d%d", t.Major, t.Minor)
	if t.ArchSpecific {
		s += "a"
	}
	return s
}

// Source is a CUDA C++ program.
type Source struct {
	// Name names the program in NVRTC's diagnostics, such as "gemv.cu".
	Name string
	// Code is the program text.
	Code string
	// Headers maps include names to contents, for #include "name".
	Headers map[string]string
	// Options are NVRTC options ("--use_fast_math", "--std=c++17", "-DTILE=64"); the
	// architecture comes from the Target and may not be given here.
	Options []string
	// NameExpressions are C++ names ("scale<float>") whose mangled names the
	// caller needs; they also instantiate templates.
	NameExpressions []string
}

func (s *Source) programName() string {
	if s.Name == "" {
		return "kernel.cu"
	}
	return s.Name
}

// sortedHeaders lists header names and contents in a stable order, for the
// compiler and the cache key alike.
func (s *Source) sortedHeaders() (names, bodies []string) {
	for name := range s.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		bodies = append(bodies, s.Headers[name])
	}
	return names, bodies
}

func (s *Source) check() error {
	if strings.TrimSpace(s.Code) == "" {
		return errdefs.Invalid("source", s.programName(), "empty program")
	}
	for _, o := range s.Options {
		if o == "-arch" || o == "--gpu-architecture" || strings.HasPrefix(o, "-arch=") || strings.HasPrefix(o, "--gpu-architecture=") {
			return errdefs.Invalid("option", o, "the architecture comes from the target")
		}
	}
	return nil
}

// Kernel is a compiled program.
type Kernel struct {
	// Image is a cubin (FormatCUBIN) or PTX text (FormatPTX), for
	// Context.LoadModule.
	Image  []byte
	Format ImageFormat
	// Arch is the -arch NVRTC compiled for: "sm_90", "sm_90a" or, for PTX,
	// "compute_90".
	Arch string
	// LoweredNames maps each name expression to its mangled name.
	LoweredNames map[string]string
	// Log is NVRTC's log: warnings, for a program that compiled.
	Log string
	// NVRTCVersion is the compiler's version, "13.0".
	NVRTCVersion string
	// Key is the cache key: sha256 of source, options, arch and NVRTC version.
	Key string
	// CacheHit says the image came from the disk cache: nothing compiled.
	CacheHit bool
	// CacheError says why the kernel could not be stored in the cache; the
	// compile itself succeeded.
	CacheError error
}

// LoweredName returns the mangled name of a name expression, or the
// expression itself when it was not declared (an extern "C" kernel).
func (k *Kernel) LoweredName(expression string) string {
	if name, ok := k.LoweredNames[expression]; ok {
		return name
	}
	return expression
}

// Load loads the kernel's image into ctx.
func (k *Kernel) Load(ctx *Context) (*Module, error) { return ctx.LoadModule(k.Image) }

// CompileError is a program NVRTC rejected; Log holds its diagnostics.
type CompileError struct {
	Program string
	Arch    string
	Op      string // the NVRTC call that failed
	Code    int    // its nvrtcResult
	Name    string // NVRTC's name for Code, e.g. NVRTC_ERROR_COMPILATION
	Log     string
}

// Error implements error; the message ends with the compile log.
func (e *CompileError) Error() string {
	msg := fmt.Sprintf("nvrtc compile %s for %s: %s: %s", e.Program, e.Arch, e.Op, e.Name)
	if log := strings.TrimSpace(e.Log); log != "" {
		msg += "\n" + log
	}
	return msg
}

// nvrtcOutput is what one successful NVRTC program yields.
type nvrtcOutput struct {
	image   []byte
	log     string
	lowered map[string]string
}

// nvrtcState is the process-wide NVRTC library: loaded once, first
// successful path wins. NVRTC calls are serialised: compiles are rare
// (the disk cache absorbs repeats) and older NVRTCs are not thread-safe.
var nvrtcState struct {
	mu           sync.Mutex
	loaded       bool
	path         string
	major, minor int
	archs        []int
	archsKnown   bool
	hasCUBIN     bool
}

// CompilerOption configures a Compiler.
type CompilerOption func(*compilerConfig)

type compilerConfig struct {
	library  string
	cacheDir string
	noCache  bool
}

// WithNVRTCLibrary loads libnvrtc from path instead of searching for it.
// It takes precedence over KCAND_LIBNVRTC.
func WithNVRTCLibrary(path string) CompilerOption {
	return func(c *compilerConfig) { c.library = path }
}

// WithKernelCacheDir keeps compiled kernels in dir instead of
// $XDG_CACHE_HOME/kcand/kernels (or ~/.cache/kcand/kernels).
func WithKernelCacheDir(dir string) CompilerOption {
	return func(c *compilerConfig) { c.cacheDir = dir }
}

// WithoutKernelCache compiles every time and stores nothing.
func WithoutKernelCache() CompilerOption {
	return func(c *compilerConfig) { c.noCache = true }
}

// Compiler compiles CUDA C++ with NVRTC for one GPU architecture at a time
// and caches the results on disk, so that a plugin's second start compiles
// nothing. It needs no GPU. It is safe for concurrent use.
type Compiler struct {
	cache   *kernelCache // nil when caching is off
	version string
}

// NewCompiler loads libnvrtc (an explicit path, then $KCAND_LIBNVRTC, then
// libnvrtc.so.13, .12, .11.2 and .so on the loader's path, then
// /usr/local/cuda/lib64). When none loads, the error wraps ErrNoNVRTC.
func NewCompiler(opts ...CompilerOption) (*Compiler, error) {
	var cfg compilerConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if err := loadNVRTC(cfg.library); err != nil {
		return nil, err
	}
	c := &Compiler{version: fmt.Sprintf("%d.%d", nvrtcState.major, nvrtcState.minor)}
	if !cfg.noCache {
		dir := cfg.cacheDir
		if dir == "" {
			var err error
			if dir, err = defaultKernelCacheDir(); err != nil {
				return nil, err
			}
		}
		c.cache = &kernelCache{dir: dir}
	}
	return c, nil
}

func loadNVRTC(explicit string) error {
	nvrtcState.mu.Lock()
	defer nvrtcState.mu.Unlock()
	if nvrtcState.loaded {
		if explicit != "" && explicit != nvrtcState.path {
			return errdefs.Invalid("nvrtc library", explicit, "libnvrtc is already loaded from %s", nvrtcState.path)
		}
		return nil
	}
	candidates := defaultNVRTCLibraries
	if explicit != "" {
		candidates = []string{explicit}
	} else if env := os.Getenv(NVRTCLibraryEnv); env != "" {
		candidates = []string{env}
	}
	var failures []string
	for _, path := range candidates {
		message, ok := nvrtcOpen(path)
		if !ok {
			failures = append(failures, message)
			continue
		}
		major, minor, r := nvrtcVersion()
		if r != 0 {
			return fmt.Errorf("%w: %s: nvrtcVersion: %s", ErrNoNVRTC, path, nvrtcName(r))
		}
		nvrtcState.loaded, nvrtcState.path = true, path
		nvrtcState.major, nvrtcState.minor = major, minor
		nvrtcState.archs, nvrtcState.archsKnown = nvrtcSupportedArchs()
		nvrtcState.hasCUBIN = nvrtcHasCUBIN()
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNoNVRTC, strings.Join(slices.Compact(failures), "; "))
}

func nvrtcName(r nvrtcResult) string {
	if name := nvrtcErrorName(r); name != "" {
		return name
	}
	return fmt.Sprintf("nvrtcResult(%d)", int(r))
}

// Version is the NVRTC version, "13.0".
func (c *Compiler) Version() string { return c.version }

// Library is the path libnvrtc was loaded from.
func (c *Compiler) Library() string {
	nvrtcState.mu.Lock()
	defer nvrtcState.mu.Unlock()
	return nvrtcState.path
}

// SupportedArchitectures lists the sm_XY this NVRTC compiles for, as XY
// (90 for sm_90); nil when the NVRTC cannot say.
func (c *Compiler) SupportedArchitectures() []int {
	nvrtcState.mu.Lock()
	defer nvrtcState.mu.Unlock()
	return slices.Clone(nvrtcState.archs)
}

// CacheDir is where compiled kernels are kept, or "" without a cache.
func (c *Compiler) CacheDir() string {
	if c.cache == nil {
		return ""
	}
	return c.cache.dir
}

// Compile compiles src for target, or returns the cached result of an
// identical earlier compile (Kernel.CacheHit). A program NVRTC rejects is a
// *CompileError carrying the log.
func (c *Compiler) Compile(src Source, target Target) (*Kernel, error) {
	if err := src.check(); err != nil {
		return nil, err
	}
	arch, format, err := chooseArch(target)
	if err != nil {
		return nil, err
	}
	options := append(slices.Clone(src.Options), "-arch="+arch)
	key := kernelCacheKey(&src, options, arch, c.version)
	if c.cache != nil {
		if k, ok := c.cache.load(key); ok {
			k.CacheHit = true
			return k, nil
		}
	}
	nvrtcState.mu.Lock()
	out, op, r := nvrtcCompile(&src, options, format == FormatCUBIN)
	nvrtcState.mu.Unlock()
	if r != 0 {
		return nil, &CompileError{Program: src.programName(), Arch: arch, Op: op, Code: int(r), Name: nvrtcName(r), Log: out.log}
	}
	k := &Kernel{
		Image:        out.image,
		Format:       format,
		Arch:         arch,
		LoweredNames: out.lowered,
		Log:          strings.TrimSpace(out.log),
		NVRTCVersion: c.version,
		Key:          key,
	}
	if c.cache != nil {
		k.CacheError = c.cache.store(k)
	}
	return k, nil
}

// chooseArch picks NVRTC's -arch for target: the real architecture (a
// cubin) when NVRTC supports it, otherwise the newest virtual architecture
// it knows that the GPU can run (PTX, compiled by the driver at load).
func chooseArch(target Target) (arch string, format ImageFormat, err error) {
	if target.Major < 1 || target.Minor < 0 || target.Minor > 9 {
		return "", "", errdefs.Invalid("target", target, "want a compute capability such as 9.0")
	}
	nvrtcState.mu.Lock()
	defer nvrtcState.mu.Unlock()
	sm := target.Major*10 + target.Minor
	supported := !nvrtcState.archsKnown || slices.Contains(nvrtcState.archs, sm)
	if target.ArchSpecific {
		if nvrtcState.major < 12 || !supported || !nvrtcState.hasCUBIN {
			return "", "", errdefs.Unsupported("NVRTC %d.%d cannot compile for %s (arch-specific targets need NVRTC 12.0+ that knows sm_%d)",
				nvrtcState.major, nvrtcState.minor, target, sm)
		}
		return target.String(), FormatCUBIN, nil
	}
	if supported && nvrtcState.hasCUBIN {
		return target.String(), FormatCUBIN, nil
	}
	virtual := sm
	if !supported {
		virtual = 0
		for _, a := range nvrtcState.archs {
			if a <= sm {
				virtual = a
			}
		}
		if virtual == 0 {
			return "", "", errdefs.Unsupported("NVRTC %d.%d knows no architecture at or below sm_%d", nvrtcState.major, nvrtcState.minor, sm)
		}
	}
	return fmt.Sprintf("compute_%d", virtual), FormatPTX, nil
}
