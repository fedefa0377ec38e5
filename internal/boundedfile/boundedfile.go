// Package boundedfile reads the files the exporter is pointed at — its
// configuration, SSH keys and passphrases, known_hosts, GCP credentials,
// kubeconfigs, tokens and CA bundles — so that no such file can hang or
// exhaust it (docs/security.md: "What the exporter bounds"): a file is
// opened without blocking, must be a regular file once symlinks are
// resolved (Kubernetes Secret and ConfigMap mounts are symlinks to regular
// files), and may not be larger than the cap of its kind.
package boundedfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Kind is a kind of file with its size cap.
type Kind struct {
	Name  string // what the file is, for messages: "private key"
	Limit int64  // its largest size in bytes
}

// The kinds of file the exporter reads, with their caps. Each is far
// above what a real file of that kind holds; known_hosts is larger than a
// key because a fleet's file lists every host.
var (
	Config      = Kind{"configuration file", 16 << 20}
	PrivateKey  = Kind{"private key", 64 << 10}
	Passphrase  = Kind{"passphrase file", 4 << 10}
	KnownHosts  = Kind{"known_hosts file", 16 << 20}
	Credentials = Kind{"credentials file", 1 << 20}
	Kubeconfig  = Kind{"kubeconfig", 4 << 20}
	Token       = Kind{"token file", 64 << 10}
	CA          = Kind{"certificate file", 4 << 20}
	// A Pod manifest; the API server's own limit on an object is 1.5 MiB.
	PodTemplate = Kind{"pod template", 1 << 20}
)

// ErrTooLarge is wrapped by the error of a file over its kind's cap.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is wrapped by the error of a file that is not a regular
// file (a named pipe, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// Read returns the contents of the file at path, which must be a regular
// file (after symlinks) of at most k.Limit bytes. It never blocks on a
// named pipe or a device: those are refused before anything is read.
// Errors name the path and the cause.
func Read(path string, k Kind) ([]byte, error) {
	// O_NONBLOCK: opening a named pipe for reading would otherwise wait
	// for a writer, and a device may block too; for a regular file the
	// flag changes nothing.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := usable(f, path, k)
	if err != nil {
		return nil, err
	}
	// The file may grow between Stat and the read: read one byte more
	// than the cap to tell. The buffer is the file's size and that byte,
	// so that a 16 MiB configuration is not read through a buffer grown
	// and copied many times over (docs/scaling.md: "Large configurations").
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, k.Limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > k.Limit {
		return nil, tooLarge(path, k)
	}
	return buf.Bytes(), nil
}

func tooLarge(path string, k Kind) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: a %s may be at most %s", ErrTooLarge, k.Name, size(k.Limit))}
}

func describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	default:
		return "mode " + m.String()
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// Check tells whether the file at path could be read by Read, without
// reading it: what the configuration loader verifies of every file it
// is pointed at.
func Check(path string, k Kind) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = usable(f, path, k)
	return err
}

// usable tells whether the open file f is a regular file within k's cap.
func usable(f *os.File, path string, k Kind) (size int64, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s): a %s must be a regular file", ErrNotRegular, describe(st.Mode()), k.Name)}
	}
	if st.Size() > k.Limit {
		return 0, tooLarge(path, k)
	}
	return st.Size(), nil
}
