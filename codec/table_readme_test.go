package codec

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// printersDoc lists the resources with a printer (## Known differences).
const printersDoc = "../docs/compatibility.md"

// TestREADMEPrinters checks that docs/compatibility.md's list of
// resources with a table printer (between "<!-- printers: begin -->" and
// "<!-- printers: end -->") is the printer registry: a printer added without
// its line there, or a line without a printer, fails here.
func TestREADMEPrinters(t *testing.T) {
	b, err := os.ReadFile(printersDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	begin := strings.Index(s, "<!-- printers: begin -->")
	end := strings.Index(s, "<!-- printers: end -->")
	if begin < 0 || end < begin {
		t.Fatal(printersDoc + " has no <!-- printers: begin --> ... <!-- printers: end --> section")
	}
	var got []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(s[begin:end], -1) {
		got = append(got, m[1])
	}
	var want []string
	for _, d := range registeredPrinters() {
		name := d.resource
		if d.group != "" {
			name += "." + d.group
		}
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s printers section lists\n%s\nwant (sorted, from the registry)\n`%s`", printersDoc, strings.Join(got, ", "), strings.Join(want, "`, `"))
	}
}
