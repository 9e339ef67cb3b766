package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// combinePlots draws one set of plots from the results of several reports (report.json of
// the suite or the regions scenario, pinned.json of the pinned one): the edge, the bare
// responder and the regions runs side by side, written as combined-* into dir.
func combinePlots(files, dir string) error {
	var all []result
	for _, path := range strings.Split(files, ",") {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var rep struct {
			Results      []result `json:"results"`
			Runs         []result `json:"runs"`
			OpenLoop     *result  `json:"open_loop"`
			OpenLoopBare *result  `json:"open_loop_bare"`
		}
		if err := json.Unmarshal(raw, &rep); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		all = append(all, rep.Results...)
		all = append(all, rep.Runs...)
		for _, r := range []*result{rep.OpenLoop, rep.OpenLoopBare} {
			if r != nil {
				all = append(all, *r)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	written, err := writePlots(dir, "combined-", all)
	if err != nil {
		return err
	}
	fmt.Println(strings.Join(written, "\n"))
	return nil
}
