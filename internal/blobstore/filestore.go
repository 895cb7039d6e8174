package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A file:// store works on its folder through os.Root: no path it opens,
// stats, lists, writes or removes resolves outside that folder, whatever
// symbolic links are inside it (a link out is an error). On top of that,
// a key whose folders include a symbolic link, or whose object is not a
// regular file (a link, a FIFO, a device), is refused with ErrNotRegular
// naming the key: only regular files are objects, and a read never blocks
// on a FIFO.

// ErrNotRegular is returned for a file:// key that is not a regular file
// in real folders of the store: a symbolic link, a FIFO, a device or a
// socket, or a key below a symbolic link. Nothing was read or removed.
var ErrNotRegular = errors.New("not a regular file in the store's own folders")

// openRoot opens the store's folder for one operation: a folder unmounted
// or replaced meanwhile is seen as it is now.
func (s *store) openRoot() (*os.Root, error) {
	r, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", s.url, err)
	}
	return r, nil
}

func notRegular(op, key, what string) error {
	return fmt.Errorf("blobstore: %s %q: %w (%s); refusing it", op, key, ErrNotRegular, what)
}

// fileErr maps a file-system error on key to the store's errors.
func fileErr(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%s %q: %w", op, key, ErrNotFound)
	}
	if errors.Is(err, ErrNotRegular) {
		return err
	}
	return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
}

// checkFolders refuses a key one of whose folders is a symbolic link (or
// not a folder: then the key is not found).
func checkFolders(r *os.Root, op, key string) error {
	segs := strings.Split(key, "/")
	for i := 1; i < len(segs); i++ {
		dir := strings.Join(segs[:i], "/")
		fi, err := r.Lstat(dir)
		if err != nil {
			return fileErr(op, key, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return notRegular(op, key, "its folder "+strconv.Quote(dir)+" is a symbolic link")
		}
		if !fi.IsDir() {
			return fileErr(op, key, syscall.ENOTDIR)
		}
	}
	return nil
}

// lstatObject returns key's file information if it is a regular file in
// real folders; a folder at key is not found.
func lstatObject(r *os.Root, op, key string) (os.FileInfo, error) {
	if err := checkFolders(r, op, key); err != nil {
		return nil, err
	}
	fi, err := r.Lstat(key)
	if err != nil {
		return nil, fileErr(op, key, err)
	}
	switch {
	case fi.IsDir():
		return nil, fileErr(op, key, fs.ErrNotExist)
	case !fi.Mode().IsRegular():
		return nil, notRegular(op, key, "it is a "+fileType(fi.Mode()))
	}
	return fi, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// fileOpen opens key for reading: a regular file, never blocking (a FIFO
// put there after the check is refused by the opened file's own type).
func (s *store) fileOpen(key string, v Version) (io.ReadCloser, error) {
	r, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if _, err := lstatObject(r, "open", key); err != nil {
		return nil, err
	}
	f, err := r.OpenFile(key, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileErr("open", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fileErr("open", key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, notRegular("open", key, "it is a "+fileType(fi.Mode()))
	}
	if found := fileVersion(fi); !v.IsZero() && !v.Matches(found) {
		_ = f.Close()
		return nil, mismatch(key, v, found)
	}
	return f, nil
}

// fileStat returns key's attributes.
func (s *store) fileStat(key string) (Attributes, error) {
	r, err := s.openRoot()
	if err != nil {
		return Attributes{}, err
	}
	defer r.Close()
	fi, err := lstatObject(r, "stat", key)
	if err != nil {
		return Attributes{}, err
	}
	return Attributes{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), Version: fileVersion(fi)}, nil
}

// fileDelete removes key, a regular file, and the folders it leaves empty.
// Removing never follows a link: the last segment is unlinked, and the
// folders it goes through stay beneath the root.
func (s *store) fileDelete(key string) error {
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := lstatObject(r, "delete", key); err != nil {
		return err
	}
	if err := r.Remove(key); err != nil {
		return fileErr("delete", key, err)
	}
	// The folders of key that the delete left empty go too, up to (not
	// including) the root, as an object store leaves no "folder" behind.
	// A folder that is not empty stays (Remove refuses it); a link is
	// never removed for one.
	for d := path.Dir(key); d != "." && d != "/"; d = path.Dir(d) {
		if fi, err := r.Lstat(d); err != nil || !fi.IsDir() {
			return nil
		}
		if err := r.Remove(d); err != nil {
			return nil
		}
	}
	return nil
}

// filePut writes r into key: a temporary file beside it, renamed over it
// once complete.
func (s *store) filePut(ctx context.Context, key string, src io.Reader) (err error) {
	r, err := s.openRoot()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := checkFolders(r, "put", key); errors.Is(err, ErrNotRegular) {
		return err
	}
	dir := path.Dir(key)
	if dir != "." {
		if err := r.MkdirAll(dir, fileDirMode); err != nil {
			return fmt.Errorf("blobstore: put %q: %w", key, err)
		}
	}
	if err := checkFolders(r, "put", key); err != nil {
		return err
	}
	if fi, err := r.Lstat(key); err == nil && !fi.Mode().IsRegular() {
		return notRegular("put", key, "a "+fileType(fi.Mode())+" is there")
	}
	tmp := key + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + ".tmp"
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileFileMode)
	if err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = r.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, src}); err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if err := r.Rename(tmp, key); err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	return nil
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// fileList lists the objects under prefix. Folders that are symbolic
// links are not descended; other entries that are not regular files are
// listed (size 0), so that reading them reports ErrNotRegular rather than
// the object seeming absent.
func (s *store) fileList(ctx context.Context, prefix string, lim ListLimits) ([]Attributes, error) {
	r, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	start := "."
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		start = prefix[:i]
		if checkFolders(r, "list", start+"/x") != nil {
			return nil, nil // not found, or refused for a link: no objects
		}
		if fi, err := r.Lstat(start); err != nil || !fi.IsDir() {
			return nil, nil
		}
	}
	tooLong := func(why string) error {
		return fmt.Errorf("blobstore: list %q in %s: %w: %s; nothing is concluded from it", prefix, s.url, ErrListingTooLong, why)
	}
	var out []Attributes
	budget := keyBudget{lim: lim}
	err = fs.WalkDir(r.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != start {
			return nil // removed meanwhile
		} else if err != nil {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() {
			if p != start && p != "." && !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(prefix, p+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(p, prefix) || fileTempName.MatchString(p) || strings.HasSuffix(p, ".attrs") {
			return nil
		}
		a := Attributes{Key: p}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			} else if err != nil {
				return err
			}
			a.Size, a.ModTime = fi.Size(), fi.ModTime()
		}
		if why := budget.add(p); why != "" {
			return tooLong(why)
		}
		out = append(out, a)
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrListingTooLong):
		return nil, err
	case ctx.Err() == context.DeadlineExceeded:
		return nil, tooLong(fmt.Sprintf("it did not end within %s (%d keys)", lim.Timeout, len(out)))
	default:
		return nil, fmt.Errorf("blobstore: list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b Attributes) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
