package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one lazybench run measured.
type Report struct {
	// Date is when the run started (UTC).
	Date time.Time `json:"date"`
	// Command is the exact command line.
	Command string `json:"command"`
	// Machine describes where it ran.
	Machine Machine `json:"machine"`
	// Peer says which peer server was compared against lazyapi: the real
	// kube-apiserver (with its version) or the reference server, and why.
	Peer string `json:"peer"`
	// Seed describes the data, when the run seeded it.
	Seed *SeedResult `json:"seed,omitempty"`
	// Data describes the objects read (kind, count, size distribution).
	Data string `json:"data,omitempty"`
	// Notes are free-form remarks (e.g. a target that could not start).
	Notes []string `json:"notes,omitempty"`
	// Results, in run order.
	Results []Result `json:"results"`
}

// Machine describes the machine a report was measured on.
type Machine struct {
	NumCPU    int    `json:"nproc"`
	MemTotal  int64  `json:"mem_total_bytes"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
}

// ThisMachine describes the current machine.
func ThisMachine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemTotal = kb << 10
			}
		}
	}
	return m
}

// String formats m for reports: "2 CPUs, 23.4 GiB, go1.26.8 linux/amd64".
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs, %.1f GiB RAM, %s %s", m.NumCPU, float64(m.MemTotal)/(1<<30), m.GoVersion, m.OS)
}

// WriteFiles writes results.json, results.md and the PNG plots into dir
// and returns the paths written.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create %q: %w", dir, err)
	}
	var paths []string
	write := func(name string, fn func(io.Writer) error) error {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			return fmt.Errorf("cannot create %q: %w", p, err)
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("cannot write %q: %w", p, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("cannot write %q: %w", p, err)
		}
		paths = append(paths, p)
		return nil
	}
	if err := write("results.json", r.WriteJSON); err != nil {
		return paths, err
	}
	plots, perr := r.WritePlots(dir)
	paths = append(paths, plots...)
	if err := write("results.md", r.WriteMarkdown); err != nil {
		return paths, err
	}
	return paths, perr
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("cannot read report: %w", err)
	}
	return &r, nil
}

func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// scenarioLabel is e.g. "listflood c=16 json".
func scenarioLabel(s Scenario) string {
	l := s.Name + " c=" + strconv.Itoa(s.Concurrency) + " " + s.Accept
	if s.Limit > 0 {
		l += " limit=" + strconv.Itoa(s.Limit)
	}
	if s.ResourceVersion != "" {
		l += " rv=" + s.ResourceVersion
	}
	if s.LabelSelector != "" {
		l += " sel=" + s.LabelSelector
	}
	if s.Rate > 0 {
		l += " rate=" + f1(s.Rate)
	}
	return l
}

func codes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+":"+strconv.FormatInt(m[k], 10))
	}
	return strings.Join(parts, " ")
}

func completeness(r Result) string {
	switch {
	case r.Watch != nil:
		if r.Watch.Expected < 0 {
			return strconv.FormatInt(r.Watch.Received, 10) + " events"
		}
		return fmt.Sprintf("%d/%d events", r.Watch.Received, r.Watch.Expected)
	case r.Informers != nil:
		return fmt.Sprintf("%d/%d synced complete", r.Informers.Complete, r.Informers.Informers)
	case r.Lists > 0:
		return fmt.Sprintf("%d/%d lists", r.Complete, r.Lists)
	}
	return "-"
}

var tableHeader = []string{"target", "scenario", "req", "req/s", "MB/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms",
	"ttfb p50", "ttfb p99", "complete", "429", "errors", "idle RSS MiB", "peak RSS MiB", "server CPU s", "MiB per CPU-s", "codes"}

func cpuSeconds(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return f2(d.Seconds())
}

func (r Result) row() []string {
	lat := r.Latency
	if r.Watch != nil {
		lat = r.Watch.Latency
	}
	if r.Informers != nil {
		lat = r.Informers.SyncTime
	}
	row := []string{r.Target, scenarioLabel(r.Scenario), strconv.FormatInt(r.Requests, 10), f1(r.RPS), f1(r.MBps),
		f2(lat.P50), f2(lat.P90), f2(lat.P99), f2(lat.P999), f2(lat.Max), f2(r.TTFB.P50), f2(r.TTFB.P99),
		completeness(r), strconv.FormatInt(r.Throttled, 10), strconv.FormatInt(r.Errors, 10), mib(r.IdleRSS), mib(r.PeakRSS),
		cpuSeconds(r.ServerCPU), f1(r.MiBPerCPUSecond), codes(r.StatusCodes)}
	if r.Error != "" {
		row[len(row)-1] += " ERROR: " + r.Error
	}
	return row
}

// WriteTerminal writes a plain-text summary table.
func (r *Report) WriteTerminal(w io.Writer) error {
	fmt.Fprintf(w, "lazybench %s  peer: %s\nmachine: %s\n", r.Date.Format(time.RFC3339), r.Peer, r.Machine)
	if r.Data != "" {
		fmt.Fprintf(w, "data: %s\n", r.Data)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, res := range r.Results {
		fmt.Fprintln(tw, strings.Join(res.row(), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range r.Results {
		if res.Probe != nil {
			fmt.Fprintf(w, "%s\n", res.probeLine())
		}
	}
	fmt.Fprintln(w, "latency columns: per request; for watch the write-to-receipt delivery latency; for informers the time to sync")
	return nil
}

// probeLine describes a listflood's GET probe.
func (r Result) probeLine() string {
	p := r.Probe
	where := p.Where
	if where == "" {
		where = ProbeInProcess
	}
	return fmt.Sprintf("%s %s GET probe (1 client, %d/s, own connection and remote IP, %s): %d GETs, p50 %s ms, p99 %s ms, max %s ms, 429 %d, errors %d, codes %s",
		r.Target, scenarioLabel(r.Scenario), probeRate, where, p.Requests, f2(p.Latency.P50), f2(p.Latency.P99), f2(p.Latency.Max), p.Throttled, p.Errors, codes(p.StatusCodes))
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# lazybench results\n\n")
	fmt.Fprintf(w, "- date: %s\n- machine: %s\n- peer: %s\n", r.Date.UTC().Format("2006-01-02 15:04 MST"), r.Machine, r.Peer)
	if r.Data != "" {
		fmt.Fprintf(w, "- data: %s\n", r.Data)
	}
	fmt.Fprintf(w, "- command: `%s`\n", r.Command)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- note: %s\n", n)
	}
	fmt.Fprintf(w, "\n")
	r.writeMarkdownTable(w)
	for _, res := range r.Results {
		if res.Probe != nil {
			fmt.Fprintf(w, "\n- %s", res.probeLine())
		}
	}
	fmt.Fprintf(w, "\nLatency columns are per request; for watch they are write-to-receipt delivery latency, for informers time to sync.\n")
	fmt.Fprintf(w, "Complete: a LIST counts only when every page returned 200, parsed, and the item count matched etcd's count.\n")
	var targets []string
	seen := map[string]bool{}
	for _, res := range r.Results {
		if !seen[res.Target] {
			seen[res.Target] = true
			targets = append(targets, res.Target)
			if res.TargetNote != "" {
				fmt.Fprintf(w, "\n- `%s`: %s", res.Target, res.TargetNote)
			}
		}
	}
	// Links only to the plots WritePlots writes: a scenario whose runs
	// sampled no memory or timed nothing has none.
	var links []string
	for _, s := range r.scenarioKeys() {
		results := r.resultsOf(s)
		if hasMemory(results) {
			links = append(links, fmt.Sprintf("[memory %s](%s)", s, plotName("memory", s)))
		}
		if hasLatency(results) {
			links = append(links, fmt.Sprintf("[latency %s](%s)", s, plotName("latency", s)))
		}
	}
	if len(links) > 0 {
		fmt.Fprintf(w, "\n\nPlots: %s", strings.Join(links, " "))
	}
	fmt.Fprintln(w)
	return nil
}

// resultsOf returns the results of the scenario labelled key.
func (r *Report) resultsOf(key string) []Result {
	var out []Result
	for _, res := range r.Results {
		if scenarioLabel(res.Scenario) == key {
			out = append(out, res)
		}
	}
	return out
}

// hasMemory says whether a memory plot of results has a line.
func hasMemory(results []Result) bool {
	for _, res := range results {
		if len(res.Memory) > 0 {
			return true
		}
	}
	return false
}

// hasLatency says whether a latency plot of results has a line.
func hasLatency(results []Result) bool {
	for _, res := range results {
		if len(res.LatencyCDF) > 0 || res.Watch != nil && len(res.Watch.CDF) > 0 {
			return true
		}
	}
	return false
}

// WriteMarkdownTable writes only the results table (for RESULTS.md).
func (r *Report) writeMarkdownTable(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(tableHeader, " | "), strings.Repeat("---|", len(tableHeader)))
	for _, res := range r.Results {
		row := res.row()
		for i := range row {
			row[i] = strings.ReplaceAll(row[i], "|", "\\|")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// scenarioKeys returns the distinct scenario labels in run order.
func (r *Report) scenarioKeys() []string {
	var keys []string
	seen := map[string]bool{}
	for _, res := range r.Results {
		k := scenarioLabel(res.Scenario)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func plotName(what, scenario string) string {
	var b strings.Builder
	for _, c := range scenario {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return what + "-" + b.String() + ".png"
}
