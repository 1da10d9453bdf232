// A pod-resources v1 client written as the kubelet's own client and the
// monitoring agents built on it are (GPU exporters and the like): grpc-go
// dialling the socket by its bare path with a context dialer, so grpc-go
// 1.33 sends that path as :authority.
//
//	podresources -socket PATH list
//	podresources -socket PATH allocatable
//	podresources -socket PATH get POD NAMESPACE
//
// It prints the answer as one line of protobuf JSON (field names as in the
// .proto, defaults included) and exits 0, or prints the error on stderr and
// exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"google.golang.org/grpc"

	pr "edgeplug.test/gen/podresources"
)

func main() {
	socket := flag.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the pod-resources socket")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, *socket, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	client := pr.NewPodResourcesListerClient(conn)
	var answer proto.Message
	switch args := flag.Args(); {
	case len(args) == 1 && args[0] == "list":
		answer, err = client.List(ctx, &pr.ListPodResourcesRequest{})
	case len(args) == 1 && args[0] == "allocatable":
		answer, err = client.GetAllocatableResources(ctx, &pr.AllocatableResourcesRequest{})
	case len(args) == 3 && args[0] == "get":
		answer, err = client.Get(ctx, &pr.GetPodResourcesRequest{PodName: args[1], PodNamespace: args[2]})
	default:
		fmt.Fprintln(os.Stderr, "usage: podresources -socket PATH list | allocatable | get POD NAMESPACE")
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
	text, err := (&jsonpb.Marshaler{OrigName: true, EmitDefaults: true}).MarshalToString(answer)
	if err != nil {
		fail(err)
	}
	fmt.Println(text)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
