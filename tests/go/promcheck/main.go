// promcheck parses a Prometheus text exposition from stdin with the Prometheus project's own parser
// (github.com/prometheus/common/expfmt) and prints one line per family: name, type, sample count.
// Exit status 1 with the parser's error when the input is not valid.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/common/expfmt"
)

func main() {
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "parse error:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := families[n]
		fmt.Printf("%s %s %d\n", n, f.GetType().String(), len(f.GetMetric()))
	}
}
