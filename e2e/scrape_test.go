package e2e

// Metric scraping shared by the race and !race tests (a helper in a
// //go:build !race file is undefined under go test -race).

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// scrape returns the value of a metric line ("name{labels}") or -1.
func scrape(url, name string) float64 { return scrapeWith(http.DefaultClient, url, name) }

// scrapeWith is scrape through hc.
func scrapeWith(hc *http.Client, url, name string) float64 {
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// metricValue reads one metric line of lazyapi's /metrics, or an error
// naming it when it is absent.
func metricValue(url, name string) (float64, error) {
	if v := scrape(url, name); v != -1 {
		return v, nil
	}
	return 0, fmt.Errorf("%s not in /metrics", name)
}
