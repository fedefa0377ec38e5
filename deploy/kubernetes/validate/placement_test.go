package validate

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const (
	placement = "../components/placement"
	headroom  = "../components/headroom"
)

// TestPlacementComponent: components/placement adds exactly a Role and its
// RoleBinding in the proxies' namespace that let the base's ServiceAccount
// create Pods there and do nothing else (docs/security.md: the exporter only
// ever sends that create with dryRun=All). It renders beside
// components/headroom. The Helm chart's value for the same Role is checked
// against these rules by the chart's own tests.
func TestPlacementComponent(t *testing.T) {
	var sa corev1.ServiceAccount
	strict(t, render(t, base)["ServiceAccount"], &sa)
	for _, components := range [][]string{{placement}, {headroom, placement}} {
		t.Run(fmt.Sprint(components), func(t *testing.T) {
			out, err := Render(base, components...)
			if err != nil {
				t.Fatal(err)
			}
			var roles []rbacv1.Role
			var bindings []rbacv1.RoleBinding
			for _, o := range splitObjects(t, "placement overlay", out) {
				switch o.Kind {
				case "Role":
					var r rbacv1.Role
					strict(t, o, &r)
					roles = append(roles, r)
				case "RoleBinding":
					var rb rbacv1.RoleBinding
					strict(t, o, &rb)
					bindings = append(bindings, rb)
				}
			}
			i := slices.IndexFunc(roles, func(r rbacv1.Role) bool { return r.Name == "provider-health-exporter-placement" })
			j := slices.IndexFunc(bindings, func(rb rbacv1.RoleBinding) bool { return rb.Name == "provider-health-exporter-placement" })
			if i < 0 || j < 0 || len(roles) != len(components) || len(bindings) != len(components) {
				t.Fatalf("roles %v, bindings %v: want the placement Role and RoleBinding, one pair per component", roles, bindings)
			}
			role, rb := roles[i], bindings[j]
			want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}
			if role.Namespace != "egress-proxies" || fmt.Sprint(role.Rules) != fmt.Sprint(want) {
				t.Errorf("Role in %q with rules %+v; want egress-proxies and only %+v", role.Namespace, role.Rules, want)
			}
			wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
			if rb.Namespace != role.Namespace || rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) ||
				!slices.Equal(rb.Subjects, wantSubjects) {
				t.Errorf("RoleBinding %+v: want %s's Role bound to %v", rb, role.Namespace, wantSubjects)
			}
		})
	}
}
