package boundedfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := Kind{"test file", 16}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	regular := write("regular", "hello")
	exact := write("exact", strings.Repeat("x", 16))
	over := write("over", strings.Repeat("x", 17))
	// A 1 GiB sparse file: refused from its size, nothing read.
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A Kubernetes Secret mount: key -> ..data/key -> ..2026_12_03/key.
	if err := os.MkdirAll(filepath.Join(dir, "..2026_12_03"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("..2026_12_03/key", "secret")
	if err := os.Symlink("..2026_12_03", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	mounted := filepath.Join(dir, "key")
	if err := os.Symlink("..data/key", mounted); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, path, want string
		is               error
	}{
		{name: "regular file", path: regular, want: "hello"},
		{name: "exactly the cap", path: exact, want: strings.Repeat("x", 16)},
		{name: "symlinks of a Secret mount", path: mounted, want: "secret"},
		{name: "one byte over the cap", path: over, is: ErrTooLarge},
		{name: "sparse 1 GiB", path: sparse, is: ErrTooLarge},
		{name: "named pipe without a writer", path: fifo, is: ErrNotRegular},
		{name: "symlink to /dev/zero", path: zero, is: ErrNotRegular},
		{name: "directory", path: dir, is: ErrNotRegular},
		{name: "missing", path: filepath.Join(dir, "missing"), is: os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Read(tc.path, small)
			if cerr := Check(tc.path, small); (cerr == nil) != (err == nil) {
				t.Errorf("Check = %v but Read = %v", cerr, err)
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Fatalf("Read = %q, %v; want an error wrapping %v", b, err, tc.is)
				}
				if !strings.Contains(err.Error(), tc.path) {
					t.Errorf("error %q does not name the path", err)
				}
				return
			}
			if err != nil || string(b) != tc.want {
				t.Fatalf("Read = %q, %v; want %q", b, err, tc.want)
			}
		})
	}
}

func TestMessagesNameKindAndCap(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(p, make([]byte, Passphrase.Limit+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Read(p, Passphrase)
	if err == nil || !strings.Contains(err.Error(), "passphrase file may be at most 4 KiB") {
		t.Fatalf("error %v, want it to name the kind and its cap", err)
	}
}
