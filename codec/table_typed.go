package codec

import (
	"encoding/json"
	"time"
)

// typedCells makes a cellsFunc that decodes the object's JSON into its
// k8s.io/api type T and prints it with print. The printers added for the
// rarely listed kinds use it: they read the same fields, through the same
// types, as kube-apiserver's printers.go.
func typedCells[T any](print func(o *T, now time.Time) []any) cellsFunc {
	return func(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
		o := new(T)
		if err := json.Unmarshal(js, o); err != nil {
			return nil, nil, err
		}
		return print(o, now), nil, nil
	}
}

// deref returns *p, or def when p is nil.
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
