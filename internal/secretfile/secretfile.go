// Package secretfile reads a file that holds a secret (an API key, a
// token, a key, or a profile holding them) the way an operator may have
// written it: with an editor, or
// with a shell's redirection of a command's output. Windows PowerShell 5's
// `>` and Out-File write UTF-16 little-endian with a byte-order mark, and
// some editors put a byte-order mark before UTF-8: each is decoded, so the
// secret is the same whichever wrote it. Errors never quote the content.
package secretfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxSecretFile bounds a file Read reads: one API key, token or key.
const MaxSecretFile = 64 << 10

// Read returns the text of the file at path (Text), refusing one larger
// than MaxSecretFile (ReadFile).
func Read(path string) (string, error) {
	b, err := ReadFile(path, MaxSecretFile)
	if err != nil {
		return "", err
	}
	return Text(b)
}

// ReadFile returns the content of the file at path, as os.ReadFile does,
// but refuses one larger than limit bytes after reading at most limit+1
// (an *fs.PathError, "read PATH: larger than 1 MiB, ..."): a path given by
// mistake to a large file, or to a device that never ends (/dev/zero,
// /dev/urandom), is not read until the system kills the process for its
// memory.
func ReadFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %s, which it should never be: is it the right file?", size(limit))}
	}
	return b, nil
}

// size is limit in the unit that reads best.
func size(limit int) string {
	switch {
	case limit >= 1<<20 && limit%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", limit>>20)
	case limit >= 1<<10 && limit%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", limit>>10)
	}
	return fmt.Sprintf("%d bytes", limit)
}

// Text returns the text of data (Decode) without surrounding whitespace
// (CRLF line ends included).
func Text(data []byte) (string, error) {
	s, err := Decode(data)
	return strings.TrimSpace(s), err
}

// Decode returns the text of data, in UTF-8, without its byte-order mark:
// data is UTF-8, with or without a byte-order mark, or UTF-16 (little- or
// big-endian) with one. UTF-16 without a byte-order mark, and bytes that
// are not text in the encoding found, are refused, naming the encoding.
func Decode(data []byte) (string, error) {
	var s string
	switch {
	case bytes.HasPrefix(data, []byte{0xEF, 0xBB, 0xBF}):
		s = string(data[3:])
	case bytes.HasPrefix(data, []byte{0xFF, 0xFE}):
		u, err := utf16Text(data[2:], false)
		if err != nil {
			return "", fmt.Errorf("UTF-16 little-endian (as Windows PowerShell 5's > writes): %w", err)
		}
		s = u
	case bytes.HasPrefix(data, []byte{0xFE, 0xFF}):
		u, err := utf16Text(data[2:], true)
		if err != nil {
			return "", fmt.Errorf("UTF-16 big-endian: %w", err)
		}
		s = u
	case len(data) >= 2 && (data[0] == 0) != (data[1] == 0):
		// ASCII text in UTF-16 has a zero byte in every pair.
		return "", errors.New("UTF-16 without a byte-order mark: save it as UTF-8 (or UTF-16 with a byte-order mark)")
	default:
		s = string(data)
	}
	if !utf8.ValidString(s) {
		return "", errors.New("not UTF-8 or UTF-16 text")
	}
	return s, nil
}

// utf16Text decodes UTF-16 code units.
func utf16Text(b []byte, bigEndian bool) (string, error) {
	if len(b)%2 != 0 {
		return "", errors.New("an odd number of bytes")
	}
	units := make([]uint16, len(b)/2)
	for i := range units {
		if bigEndian {
			units[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
		} else {
			units[i] = uint16(b[2*i+1])<<8 | uint16(b[2*i])
		}
	}
	runes := utf16.Decode(units)
	for _, r := range runes {
		if r == utf8.RuneError {
			return "", errors.New("not valid UTF-16")
		}
	}
	return string(runes), nil
}

// ReadRegularFile is ReadFile of a file that must be a regular one (a
// config file): anything else (a FIFO, whose open waits for a writer and
// no signal ends; a device; a directory) is refused before it is opened,
// naming what it is.
func ReadRegularFile(path string, limit int) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file: give the file itself", path, kind(m))
	}
	return ReadFile(path, limit)
}

// kind names a mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file (" + m.Type().String() + ")"
}
