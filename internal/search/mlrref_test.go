package search

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The reference is FD.io's MLRsearch 1.2.1 from PyPI, in the venv scripts/mlrsearch-venv.sh makes.
const (
	mlrRefPython  = "/var/cache/cnibench/mlrsearch-1.2.1/venv/bin/python3"
	mlrRefInstall = "bash scripts/mlrsearch-venv.sh"
)

// refSpec is testdata/mlrref.json: the search parameters and the simulated devices both the
// Go search and the reference (testdata/mlrref.py) run on.
type refSpec struct {
	Search struct {
		MinRate         float64   `json:"min_rate"`
		MaxRate         float64   `json:"max_rate"`
		LossRatios      []float64 `json:"loss_ratios"`
		RelWidth        float64   `json:"relative_width"`
		InitialDuration float64   `json:"initial_duration"`
		FinalDuration   float64   `json:"final_duration"`
		ExceedRatio     float64   `json:"exceed_ratio"`
	} `json:"search"`
	Devices []refDevice `json:"devices"`
}

// refDevice loses packets as testdata/mlrref.json's comment says (mlrref.py's lost_of).
type refDevice struct {
	Name     string  `json:"name"`
	Capacity float64 `json:"capacity"`
	Buffer   float64 `json:"buffer"`
	Knee     float64 `json:"knee"`
	Slope    float64 `json:"slope"`
	StepRate float64 `json:"step_rate"`
	StepLoss float64 `json:"step_loss"`
}

func (dv refDevice) lost(rate, seconds float64) (sent, lost uint64) {
	s := math.Floor(rate*seconds + 0.5)
	loss := 0.0
	if dv.StepRate > 0 && rate > dv.StepRate {
		loss += s * dv.StepLoss
	}
	if dv.Slope > 0 && rate > dv.Knee {
		loss += s * dv.Slope * (rate - dv.Knee) / rate
	}
	if dv.Capacity > 0 {
		if over := s - loss - (dv.Capacity*seconds + dv.Buffer); over > 0 {
			loss += over
		}
	}
	return uint64(s), uint64(math.Min(s, math.Ceil(loss-1e-9)))
}

func (dv refDevice) Measure(_ context.Context, rate float64, d time.Duration) (Trial, error) {
	sent, lost := dv.lost(rate, d.Seconds())
	return Trial{Sent: sent, Lost: lost}, nil
}

// refOut is what mlrref.py prints.
type refOut struct {
	Devices []struct {
		Name  string `json:"name"`
		Goals []struct {
			LossRatio float64 `json:"loss_ratio"`
			Lower     float64 `json:"lower"`
			Upper     float64 `json:"upper"`
		} `json:"goals"`
		Trials []struct {
			Duration float64 `json:"duration"`
			Rate     float64 `json:"rate"`
			Sent     uint64  `json:"sent"`
			Lost     uint64  `json:"lost"`
		} `json:"trials"`
		TrialTime float64 `json:"trial_time"`
	} `json:"devices"`
}

// MLR against FD.io's reference on the same simulated devices (loss ratios 0 and 0.005, width
// 0.005, trials of 1 s to 10 s, exceed ratio 0, duration sum 10 s): per device NDR and PDR
// within the width goal of the reference's, and in total no more trial time.
func TestMLRMatchesReference(t *testing.T) {
	py := os.Getenv("CNIBENCH_MLRSEARCH_PYTHON")
	if py == "" {
		py = mlrRefPython
	}
	check := exec.Command(py, "-c", "import importlib.metadata as m, sys; v = m.version('MLRsearch'); sys.exit(v != '1.2.1' and 'MLRsearch ' + v)")
	if out, err := check.CombinedOutput(); err != nil {
		why := err.Error()
		if o := bytes.TrimSpace(out); len(o) > 0 {
			why += ": " + string(o[bytes.LastIndexByte(o, '\n')+1:])
		}
		msg := fmt.Sprintf("reference MLRsearch 1.2.1 not installed for %s (%s); install it with `%s` from the repository root (or set CNIBENCH_MLRSEARCH_PYTHON)",
			py, why, mlrRefInstall)
		if os.Getenv("CNIBENCH_REQUIRE_TOOLS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	specPath := filepath.Join("testdata", "mlrref.json")
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec refSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	s := spec.Search
	if len(spec.Devices) < 12 || s.ExceedRatio != 0 {
		t.Fatalf("%s: %d devices, exceed ratio %g: want 12 or more and 0", specPath, len(spec.Devices), s.ExceedRatio)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "mlrref.py"), specPath)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s testdata/mlrref.py: %v\n%s", py, err, stderr.String())
	}
	var ref refOut
	if err := json.Unmarshal(stdout.Bytes(), &ref); err != nil {
		t.Fatalf("reference output: %v\n%s", err, stdout.String())
	}
	if len(ref.Devices) != len(spec.Devices) {
		t.Fatalf("reference ran %d devices, want %d", len(ref.Devices), len(spec.Devices))
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	cfg := Config{MinRate: s.MinRate, MaxRate: s.MaxRate, Targets: s.LossRatios, RelWidth: s.RelWidth,
		InitialDuration: sec(s.InitialDuration), FinalDuration: sec(s.FinalDuration)}
	var refSum, goSum float64
	var table strings.Builder
	fmt.Fprintf(&table, "%-15s %11s %11s %11s %11s %8s %8s %6s %5s %5s\n", "device", "ref NDR", "go NDR", "ref PDR", "go PDR", "ref s", "go s", "go/ref", "ref n", "go n")
	for i, dv := range spec.Devices {
		rd := ref.Devices[i]
		if rd.Name != dv.Name || len(rd.Goals) != len(s.LossRatios) {
			t.Fatalf("reference device %d: %q with %d goals, want %q", i, rd.Name, len(rd.Goals), dv.Name)
		}
		// Both sides simulate the same device: every reference trial lost what the Go model says.
		for _, tr := range rd.Trials {
			if sent, lost := dv.lost(tr.Rate, tr.Duration); sent != tr.Sent || lost != tr.Lost {
				t.Fatalf("%s: reference trial at %.1f pps for %g s sent %d lost %d; the Go model: %d, %d", dv.Name, tr.Rate, tr.Duration, tr.Sent, tr.Lost, sent, lost)
			}
		}
		res, err := MLR(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for k, g := range res.Goals {
			rg := rd.Goals[k]
			if rg.LossRatio != g.Target {
				t.Fatalf("%s: goal %d is loss ratio %g in the reference, %g here", dv.Name, k, rg.LossRatio, g.Target)
			}
			if g.Note != "" || g.Width > s.RelWidth || g.Lower <= 0 || g.Upper <= g.Lower {
				t.Errorf("%s loss ratio %g: %+v", dv.Name, g.Target, g)
			}
			if d := math.Abs(g.Lower - rg.Lower); d > s.RelWidth*math.Max(g.Lower, rg.Lower)+1e-9 {
				t.Errorf("%s loss ratio %g: lower bound %.1f, the reference's %.1f: %.3f %% apart, more than the width goal",
					dv.Name, g.Target, g.Lower, rg.Lower, 100*d/math.Max(g.Lower, rg.Lower))
			}
			// RFC 9971 bounds at exceed ratio 0, duration sum = final duration: the lower bound
			// has a good final-duration trial and no bad one; the upper bound has a bad trial.
			goodLong, bad := false, false
			for _, tr := range res.Trials {
				if tr.Rate == g.Upper && tr.LossRatio() > g.Target {
					bad = true
				}
				if tr.Rate != g.Lower {
					continue
				}
				if tr.LossRatio() > g.Target {
					t.Errorf("%s loss ratio %g: lower bound %.1f lost %d of %d in %s", dv.Name, g.Target, g.Lower, tr.Lost, tr.Sent, tr.Duration)
				} else if tr.Duration >= cfg.FinalDuration {
					goodLong = true
				}
			}
			if !goodLong || !bad {
				t.Errorf("%s loss ratio %g: lower bound %.1f measured good at %s: %v; upper bound %.1f measured bad: %v", dv.Name, g.Target, g.Lower, cfg.FinalDuration, goodLong, g.Upper, bad)
			}
		}
		refSum += rd.TrialTime
		goSum += res.TrialTime.Seconds()
		fmt.Fprintf(&table, "%-15s %11.1f %11.1f %11.1f %11.1f %8.2f %8.2f %6.3f %5d %5d\n", dv.Name, rd.Goals[0].Lower, res.Goals[0].Lower,
			rd.Goals[1].Lower, res.Goals[1].Lower, rd.TrialTime, res.TrialTime.Seconds(), res.TrialTime.Seconds()/rd.TrialTime, len(rd.Trials), len(res.Trials))
	}
	fmt.Fprintf(&table, "%-15s %11s %11s %11s %11s %8.2f %8.2f %6.3f", "total", "", "", "", "", refSum, goSum, goSum/refSum)
	t.Logf("trial time, reference MLRsearch 1.2.1 and this search:\n%s", table.String())
	if goSum > refSum {
		t.Errorf("total trial time %.2f s, the reference's %.2f s: ratio %.3f, want <= 1", goSum, refSum, goSum/refSum)
	}
}
