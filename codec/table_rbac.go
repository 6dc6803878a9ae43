package codec

import (
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	rbacv1beta1 "k8s.io/api/rbac/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rbacPrinters are the printers of the rbac.authorization.k8s.io group.
func rbacPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("rbac.authorization.k8s.io", "rolebindings", roleBindingCells, c.name,
			metav1.TableColumnDefinition{Name: "Role", Type: "string", Description: rbacv1beta1.RoleBinding{}.SwaggerDoc()["roleRef"]},
			c.age,
			metav1.TableColumnDefinition{Name: "Users", Type: "string", Priority: 1, Description: "Users in the roleBinding"},
			metav1.TableColumnDefinition{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the roleBinding"},
			metav1.TableColumnDefinition{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the roleBinding"},
		),
		def("rbac.authorization.k8s.io", "clusterrolebindings", roleBindingCells, c.name,
			metav1.TableColumnDefinition{Name: "Role", Type: "string", Description: rbacv1beta1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]},
			c.age,
			metav1.TableColumnDefinition{Name: "Users", Type: "string", Priority: 1, Description: "Users in the clusterRoleBinding"},
			metav1.TableColumnDefinition{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the clusterRoleBinding"},
			metav1.TableColumnDefinition{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the clusterRoleBinding"},
		),
	}
}

// roleBindingCells prints RoleBindings and ClusterRoleBindings: the role as
// Kind/Name, and the subjects split as rbac.SubjectsStrings does.
func roleBindingCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		RoleRef  struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"roleRef"`
		Subjects []struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"subjects"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var users, groups, sas []string
	for _, sub := range o.Subjects {
		switch sub.Kind {
		case "ServiceAccount":
			sas = append(sas, sub.Namespace+"/"+sub.Name)
		case "User":
			users = append(users, sub.Name)
		case "Group":
			groups = append(groups, sub.Name)
		}
	}
	return []any{o.Metadata.Name, o.RoleRef.Kind + "/" + o.RoleRef.Name, translateTimestampSince(o.Metadata.CreationTimestamp, now),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}, nil, nil
}
