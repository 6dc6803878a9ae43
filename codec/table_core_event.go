package codec

import (
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

func translateMicroTimestampSince(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func eventCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var e struct {
		Metadata       objMeta `json:"metadata"`
		InvolvedObject struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			FieldPath string `json:"fieldPath"`
		} `json:"involvedObject"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Source  struct {
			Component string `json:"component"`
			Host      string `json:"host"`
		} `json:"source"`
		FirstTimestamp metav1.Time      `json:"firstTimestamp"`
		LastTimestamp  metav1.Time      `json:"lastTimestamp"`
		Count          int32            `json:"count"`
		Type           string           `json:"type"`
		EventTime      metav1.MicroTime `json:"eventTime"`
		Series         *struct {
			Count            int32            `json:"count"`
			LastObservedTime metav1.MicroTime `json:"lastObservedTime"`
		} `json:"series"`
		ReportingController string `json:"reportingComponent"`
		ReportingInstance   string `json:"reportingInstance"`
	}
	if err := gojson.Unmarshal(js, &e); err != nil {
		return nil, nil, err
	}
	first := translateTimestampSince(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = translateMicroTimestampSince(e.EventTime, now)
	}
	last := translateTimestampSince(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = translateMicroTimestampSince(e.Series.LastObservedTime, now)
		count = e.Series.Count
	} else if count == 0 {
		count = 1 // singleton events of the new API have no count
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component, instance := e.Source.Component, e.Source.Host
	if component == "" {
		component = e.ReportingController
	}
	if instance == "" {
		instance = e.ReportingInstance
	}
	source := component
	if instance != "" {
		source += ", " + instance
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message),
		first, int64(count), e.Metadata.Name}, nil, nil
}
