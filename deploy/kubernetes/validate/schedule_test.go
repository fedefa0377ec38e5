package validate

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const schedule = "../components/schedule"

// scheduleRules are the rules of components/schedule and of the chart's
// rbac.schedule: list and watch Nodes and Pods, cluster-wide, and list
// and watch namespaces (their labels, for namespaceSelector terms),
// nothing more.
var scheduleRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
}

// TestScheduleComponent: components/schedule adds exactly a ClusterRole
// and its ClusterRoleBinding to the base's ServiceAccount, with
// scheduleRules, beside the base's own ClusterRole and the placement
// component that schedule needs.
func TestScheduleComponent(t *testing.T) {
	var sa corev1.ServiceAccount
	strict(t, render(t, base)["ServiceAccount"], &sa)
	out, err := Render(base, placement, schedule)
	if err != nil {
		t.Fatal(err)
	}
	var roles []rbacv1.ClusterRole
	var bindings []rbacv1.ClusterRoleBinding
	for _, o := range splitObjects(t, "schedule overlay", out) {
		switch o.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			strict(t, o, &r)
			roles = append(roles, r)
		case "ClusterRoleBinding":
			var rb rbacv1.ClusterRoleBinding
			strict(t, o, &rb)
			bindings = append(bindings, rb)
		}
	}
	i := slices.IndexFunc(roles, func(r rbacv1.ClusterRole) bool { return r.Name == "provider-health-exporter-schedule" })
	j := slices.IndexFunc(bindings, func(rb rbacv1.ClusterRoleBinding) bool { return rb.Name == "provider-health-exporter-schedule" })
	if i < 0 || j < 0 || len(roles) != 2 || len(bindings) != 2 {
		t.Fatalf("cluster roles %v, bindings %v: want the base's and the schedule pair", roles, bindings)
	}
	role, rb := roles[i], bindings[j]
	if fmt.Sprint(role.Rules) != fmt.Sprint(scheduleRules) {
		t.Errorf("ClusterRole rules %+v; want only %+v", role.Rules, scheduleRules)
	}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) || !slices.Equal(rb.Subjects, wantSubjects) {
		t.Errorf("ClusterRoleBinding %+v: want %s bound to %v", rb, role.Name, wantSubjects)
	}
}

// TestChartScheduleRole: rbac.schedule is off by default; on, the chart
// renders the ClusterRole of components/schedule, bound to its
// ServiceAccount, beside its base ClusterRole.
func TestChartScheduleRole(t *testing.T) {
	if c := renderChart(t, nil); c.scheduleRole != nil || c.scheduleBinding != nil {
		t.Error("default values render the schedule ClusterRole")
	}
	var component rbacv1.ClusterRole
	for _, o := range splitObjects(t, "schedule component", mustRender(t, base, schedule)) {
		if o.Kind == "ClusterRole" && o.Metadata.Name == "provider-health-exporter-schedule" {
			strict(t, o, &component)
		}
	}
	c := renderChart(t, map[string]any{"rbac": map[string]any{"schedule": map[string]any{"enabled": true}}})
	if c.scheduleRole == nil || c.scheduleBinding == nil || c.clusterRole == nil {
		t.Fatal("rbac.schedule.enabled renders no schedule ClusterRole and binding beside the base's")
	}
	if fmt.Sprint(c.scheduleRole.Rules) != fmt.Sprint(component.Rules) || fmt.Sprint(component.Rules) != fmt.Sprint(scheduleRules) {
		t.Errorf("chart rules %+v, component rules %+v; want both %+v", c.scheduleRole.Rules, component.Rules, scheduleRules)
	}
	sa := c.deployment.Spec.Template.Spec.ServiceAccountName
	rb := c.scheduleBinding
	if rb.RoleRef.Name != c.scheduleRole.Name || rb.RoleRef.Kind != "ClusterRole" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != chartNamespace {
		t.Errorf("schedule binding %+v: want %s bound to ServiceAccount %s/%s", rb, c.scheduleRole.Name, chartNamespace, sa)
	}
}

func mustRender(t *testing.T, dir string, components ...string) []byte {
	t.Helper()
	out, err := Render(dir, components...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
