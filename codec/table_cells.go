package codec

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// objMeta is the part of ObjectMeta the printers read.
type objMeta struct {
	Name              string            `json:"name"`
	CreationTimestamp metav1.Time       `json:"creationTimestamp"`
	DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
	Labels            map[string]string `json:"labels"`
}

// translateTimestampSince is the printers' Age: the time since t in
// human-readable approximation, "<unknown>" for a zero time.
func translateTimestampSince(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

type containerNameImage struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// layoutContainerCells joins the container names and images with ",".
func layoutContainerCells(cs []containerNameImage) (names, images string) {
	var n, i strings.Builder
	for k, c := range cs {
		if k > 0 {
			n.WriteByte(',')
			i.WriteByte(',')
		}
		n.WriteString(c.Name)
		i.WriteString(c.Image)
	}
	return n.String(), i.String()
}

// podTemplate is the part of a PodTemplateSpec the printers read.
type podTemplate struct {
	Spec struct {
		Containers   []containerNameImage `json:"containers"`
		NodeSelector map[string]string    `json:"nodeSelector"`
	} `json:"spec"`
}

// replicasOr1 is spec.replicas as kube-apiserver defaults it.
func replicasOr1(r *int32) int64 {
	if r == nil {
		return 1
	}
	return int64(*r)
}

// listWithMore joins list with "," and says how many more there were.
func listWithMore(list []string, more bool, count, max int) string {
	ret := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", ret, count-max)
	}
	return ret
}
