package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Exit statuses.
const (
	exitOK       = 0
	exitViolated = 1 // the bound was violated, or the run failed
	exitUsage    = 2
)

// run is the whole program but for the process: flags in, exit status
// out. Progress goes to stdout (in place when term), errors to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, term bool) int {
	cfg, err := parseConfig(args, stdout)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasequota-sim: %v\nRun leasequota-sim -h for the flags.\n", err)
		return exitUsage
	}
	var prog *progress
	if cfg.Progress {
		prog = newProgress(stdout, term)
	}
	res, err := Run(ctx, cfg, prog)
	if err != nil {
		fmt.Fprintf(stderr, "leasequota-sim: %v\n", err)
		return exitViolated
	}
	writeSummary(stdout, res)
	if cfg.Report != "" {
		if err := writeReportFile(cfg.Report, res); err != nil {
			fmt.Fprintf(stderr, "leasequota-sim: report: %v\n", err)
			return exitViolated
		}
		abs, err := filepath.Abs(cfg.Report)
		if err != nil {
			abs = cfg.Report
		}
		fmt.Fprintf(stdout, "\nreport: %s\n", abs)
	}
	if !res.BoundOK() {
		return exitViolated
	}
	return exitOK
}
