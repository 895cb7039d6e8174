package archive

// Item is one item decoded from a backup tarball.
type Item struct {
	// Ordinal is the item's position among the unique items of the
	// tarball, from 0. It is deterministic for a given tarball.
	Ordinal int64
	// Path is the tar entry the item came from.
	Path string
	// Group is empty for the core group.
	Group     string
	Version   string
	Resource  string
	Kind      string
	Namespace string
	Name      string
	Labels    map[string]string
	// Object is the item's JSON. Each Item owns its slice, until it is
	// handed back through Reader.Recycle.
	Object []byte

	// chunk counts Object, carved from the bodies of from; see Recycle.
	chunk *bodyChunk
	from  *Reader
}

// GroupResource returns "resource.group", or "resource" for the core group.
func (i *Item) GroupResource() string {
	if i.Group == "" {
		return i.Resource
	}
	return i.Resource + "." + i.Group
}

// Key identifies the item: "resource.group/namespace/name" ("resource.group//name"
// for cluster-scoped items).
func (i *Item) Key() string {
	return i.GroupResource() + "/" + i.Namespace + "/" + i.Name
}
