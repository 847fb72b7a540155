package lockscan

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// walkProto counts FuncCall nodes by walking the protobuf parse tree with
// reflection, the generic way; used only to compare strategies.
func walkProto(m protoreflect.Message, n *int) {
	if _, ok := m.Interface().(*pg_query.FuncCall); ok {
		*n++
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkProto(l.Get(i).Message(), n)
			}
		case fd.Message() != nil && !fd.IsMap():
			walkProto(v.Message(), n)
		}
		return true
	})
}
