package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// checkConfig implements --config.check: the loader's verdict on the file,
// then a warning for each referenced file whose contents a check would
// reject. Those do not fail the check, because at run time they only make
// their own target not ready.
func checkConfig(path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "FAILED: %v\n", err)
		return 1
	}
	for _, w := range referencedFileWarnings(cfg) {
		fmt.Fprintf(stderr, "WARNING: %s\n", w)
	}
	fmt.Fprintf(stdout, "SUCCESS: %s: %s\n", path, cfg.Summary())
	return 0
}

func referencedFileWarnings(cfg *config.Config) []string {
	var out []string
	warn := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	for _, k := range cfg.Kubernetes {
		if k.Kubeconfig == "" {
			continue
		}
		kc, err := clientcmd.LoadFromFile(k.Kubeconfig)
		if err != nil {
			warn("kubernetes %q: kubeconfig %s: %v", k.Name, k.Kubeconfig, err)
			continue
		}
		ctxName := k.Context
		if ctxName == "" {
			ctxName = kc.CurrentContext
		}
		if _, ok := kc.Contexts[ctxName]; !ok {
			warn("kubernetes %q: kubeconfig %s: context %q not found", k.Name, k.Kubeconfig, ctxName)
		}
	}
	for _, g := range cfg.GCP {
		if g.CredentialsFile == "" {
			continue
		}
		if err := checkGCPCredentials(g.CredentialsFile); err != nil {
			warn("gcp %q: credentials_file %s: %v", g.Name, g.CredentialsFile, err)
		}
	}
	for _, v := range cfg.KVM {
		var passphrase []byte
		if v.PassphraseFile != "" {
			b, err := os.ReadFile(v.PassphraseFile)
			if err != nil {
				warn("kvm %q: passphrase_file: %v", v.Name, err)
			}
			passphrase = trimNewline(b)
		}
		if v.KnownHostsFile != "" {
			if _, err := knownhosts.New(v.KnownHostsFile); err != nil {
				warn("kvm %q: known_hosts_file %s: %v", v.Name, v.KnownHostsFile, err)
			}
		}
		if v.InsecureIgnoreHostKey {
			warn("kvm %q: insecure_ignore_host_key is true: host keys are not verified", v.Name)
		}
		seen := map[string]bool{}
		for _, h := range v.Hosts {
			if seen[h.PrivateKeyFile] {
				continue
			}
			seen[h.PrivateKeyFile] = true
			if err := checkPrivateKey(h.PrivateKeyFile, passphrase); err != nil {
				warn("kvm %q: private_key_file %s: %v", v.Name, h.PrivateKeyFile, err)
			}
		}
	}
	return out
}

func checkPrivateKey(path string, passphrase []byte) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if passphrase == nil {
			return errors.New("key is encrypted and no passphrase_file is set")
		}
		_, err = ssh.ParsePrivateKeyWithPassphrase(pem, passphrase)
	}
	return err
}

func checkGCPCredentials(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("not a JSON credentials file: %w", err)
	}
	switch f.Type {
	case "service_account", "authorized_user", "external_account", "impersonated_service_account", "external_account_authorized_user":
		return nil
	case "":
		return errors.New("no \"type\" field")
	default:
		return fmt.Errorf("unsupported credentials type %q", f.Type)
	}
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
