package redact

import "testing"

func TestURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://user:s3cret@api.example:6443/path":       "https://api.example:6443/path",
		"https://user@api.example":                        "https://api.example",
		"http://h:80/x?token=abc&sig=def&flag":            "http://h:80/x?token=xxxxx&sig=xxxxx&flag",
		"https://a:b@h/x?access_token=t#frag":             "https://h/x?access_token=xxxxx",
		"https://h/x#access_token=t":                      "https://h/x",
		"https://compute.googleapis.com":                  "https://compute.googleapis.com",
		"https://127.0.0.1:6443":                          "https://127.0.0.1:6443",
		"192.0.2.10:22":                                   "192.0.2.10:22",
		"[2001:db8::1]:2222":                              "[2001:db8::1]:2222",
		"projects/crawl-prod-123":                         "projects/crawl-prod-123",
		"/var/run/libvirt/libvirt-sock":                   "/var/run/libvirt/libvirt-sock",
		"":                                                "",
		"labels.managed-by = \"egress-proxies-operator\"": "labels.managed-by = \"egress-proxies-operator\"",
		"http://h/%zz?x=1":                                "http://h/%zz?x=xxxxx",
		"http://u:p@h/%zz#f":                              "http://h/%zz",
		"https://u:p@h/ok?token=a%20b&other=&x=y=z":       "https://h/ok?token=xxxxx&other=xxxxx&x=xxxxx",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
