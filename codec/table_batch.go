package codec

import (
	"fmt"
	"time"

	gojson "github.com/goccy/go-json"
	batchv1 "k8s.io/api/batch/v1"
	batchv1beta1 "k8s.io/api/batch/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// batchPrinters are the printers of the batch group.
func batchPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("batch", "jobs", jobCells, c.name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "Status of the job."},
			metav1.TableColumnDefinition{Name: "Completions", Type: "string", Description: batchv1.JobStatus{}.SwaggerDoc()["succeeded"]},
			metav1.TableColumnDefinition{Name: "Duration", Type: "string", Description: "Time required to complete the job."},
			c.age, c.containers, c.images,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: batchv1.JobSpec{}.SwaggerDoc()["selector"]},
		),
		def("batch", "cronjobs", cronJobCells, c.name,
			metav1.TableColumnDefinition{Name: "Schedule", Type: "string", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["schedule"]},
			metav1.TableColumnDefinition{Name: "Timezone", Type: "string", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["timeZone"]},
			metav1.TableColumnDefinition{Name: "Suspend", Type: "boolean", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["suspend"]},
			metav1.TableColumnDefinition{Name: "Active", Type: "integer", Description: batchv1beta1.CronJobStatus{}.SwaggerDoc()["active"]},
			metav1.TableColumnDefinition{Name: "Last Schedule", Type: "string", Description: batchv1beta1.CronJobStatus{}.SwaggerDoc()["lastScheduleTime"]},
			c.age, c.containers, c.images,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: batchv1.JobSpec{}.SwaggerDoc()["selector"]},
		),
	}
}

type jobSpecForTable struct {
	Completions *int32                `json:"completions"`
	Parallelism *int32                `json:"parallelism"`
	Selector    *metav1.LabelSelector `json:"selector"`
	Template    podTemplate           `json:"template"`
}

func jobCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta         `json:"metadata"`
		Spec     jobSpecForTable `json:"spec"`
		Status   struct {
			Succeeded      int32        `json:"succeeded"`
			StartTime      *metav1.Time `json:"startTime"`
			CompletionTime *metav1.Time `json:"completionTime"`
			Conditions     []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var completions string
	if o.Spec.Completions != nil {
		completions = fmt.Sprintf("%d/%d", o.Status.Succeeded, *o.Spec.Completions)
	} else if o.Spec.Parallelism != nil && *o.Spec.Parallelism > 1 {
		completions = fmt.Sprintf("%d/1 of %d", o.Status.Succeeded, *o.Spec.Parallelism)
	} else {
		completions = fmt.Sprintf("%d/1", o.Status.Succeeded)
	}
	var jobDuration string
	switch {
	case o.Status.StartTime == nil:
	case o.Status.CompletionTime == nil:
		jobDuration = duration.HumanDuration(now.Sub(o.Status.StartTime.Time))
	default:
		jobDuration = duration.HumanDuration(o.Status.CompletionTime.Sub(o.Status.StartTime.Time))
	}
	// The first condition of a type decides whether the job has it.
	has := func(typ batchv1.JobConditionType) bool {
		for _, c := range o.Status.Conditions {
			if c.Type == string(typ) {
				return c.Status == string(corev1.ConditionTrue)
			}
		}
		return false
	}
	var status string
	switch {
	case has(batchv1.JobComplete):
		status = "Complete"
	case has(batchv1.JobFailed):
		status = "Failed"
	case o.Metadata.DeletionTimestamp != nil:
		status = "Terminating"
	case has(batchv1.JobSuspended):
		status = "Suspended"
	case has(batchv1.JobFailureTarget):
		status = "FailureTarget"
	default:
		status = "Running"
	}
	names, images := layoutContainerCells(o.Spec.Template.Spec.Containers)
	return []any{o.Metadata.Name, status, completions, jobDuration, translateTimestampSince(o.Metadata.CreationTimestamp, now),
		names, images, metav1.FormatLabelSelector(o.Spec.Selector)}, nil, nil
}

func cronJobCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Schedule    string  `json:"schedule"`
			TimeZone    *string `json:"timeZone"`
			Suspend     *bool   `json:"suspend"`
			JobTemplate struct {
				Spec jobSpecForTable `json:"spec"`
			} `json:"jobTemplate"`
		} `json:"spec"`
		Status struct {
			Active           []gojson.RawMessage `json:"active"`
			LastScheduleTime *metav1.Time        `json:"lastScheduleTime"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	last := "<none>"
	if o.Status.LastScheduleTime != nil {
		last = translateTimestampSince(*o.Status.LastScheduleTime, now)
	}
	tz := "<none>"
	if o.Spec.TimeZone != nil {
		tz = *o.Spec.TimeZone
	}
	suspend := "<unset>" // printBoolPtr: a string, although the column is boolean
	if o.Spec.Suspend != nil {
		suspend = "False"
		if *o.Spec.Suspend {
			suspend = "True"
		}
	}
	jt := o.Spec.JobTemplate.Spec
	names, images := layoutContainerCells(jt.Template.Spec.Containers)
	return []any{o.Metadata.Name, o.Spec.Schedule, tz, suspend, int64(len(o.Status.Active)), last,
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images, metav1.FormatLabelSelector(jt.Selector)}, nil, nil
}
