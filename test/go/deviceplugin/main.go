// A device plugin written as the ecosystem's Go plugins are (the Kubernetes
// sample plugin, NVIDIA's, generic-device-plugin): grpc-go, a server on its
// own socket in the device-plugins directory, and Register called on
// kubelet.sock dialled by its bare path with a context dialer. grpc-go 1.33
// then sends that path as the :authority of every call, which is what this
// peer exists to put in front of edgeplug.
//
// It polls (every 100 ms, as fsnotify is not among Debian's Go packages) for
// what a kubelet restart looks like from a plugin: its own socket removed,
// or kubelet.sock re-created. Either way it serves its socket afresh and
// registers again.
//
// With -registry DIR it registers the other way the kubelet offers: it also
// serves pluginregistration.Registration on its socket, placed in the
// watched directory DIR, and never calls Register.
//
// Stdin takes one command a line: `unhealthy ID...` and `healthy ID...`
// change device health (sent to every ListAndWatch stream). Stdout has one
// machine-readable line per event: SERVING path, REGISTERED,
// REGISTER_FAILED error, RESTART reason, LISTANDWATCH, HEALTH id=state...,
// PREFERRED ids, ALLOCATE ids, PRESTART ids, STOPPED.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	dp "edgeplug.test/gen/deviceplugin"
	reg "edgeplug.test/gen/pluginregistration"
)

var stdout sync.Mutex

// say prints one line at a time, so the test never reads half of one.
func say(format string, args ...interface{}) {
	stdout.Lock()
	defer stdout.Unlock()
	fmt.Printf(format+"\n", args...)
}

// deviceSet is the plugin's devices and their health; every change wakes
// the ListAndWatch streams through a channel closed and replaced.
type deviceSet struct {
	mu      sync.Mutex
	ids     []string
	numa    map[string]int64
	health  map[string]string
	changed chan struct{}
}

func newDeviceSet(resource string, count, numaNodes int) *deviceSet {
	base := resource[strings.LastIndex(resource, "/")+1:]
	set := &deviceSet{numa: map[string]int64{}, health: map[string]string{}, changed: make(chan struct{})}
	for i := 0; i < count; i++ {
		id := fmt.Sprintf("%s%d", base, i)
		set.ids = append(set.ids, id)
		set.health[id] = "Healthy"
		if numaNodes > 0 {
			set.numa[id] = int64(i % numaNodes)
		}
	}
	return set
}

func (s *deviceSet) snapshot() ([]*dp.Device, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devices := make([]*dp.Device, 0, len(s.ids))
	for _, id := range s.ids {
		device := &dp.Device{ID: id, Health: s.health[id]}
		if node, ok := s.numa[id]; ok {
			device.Topology = &dp.TopologyInfo{Nodes: []*dp.NUMANode{{ID: node}}}
		}
		devices = append(devices, device)
	}
	return devices, s.changed
}

func (s *deviceSet) setHealth(ids []string, health string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []string
	for _, id := range ids {
		if _, known := s.health[id]; !known {
			say("UNKNOWN_DEVICE %s", id)
			continue
		}
		s.health[id] = health
		changed = append(changed, id+"="+health)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	say("HEALTH %s", strings.Join(changed, ","))
}

type devicePlugin struct {
	dp.UnimplementedDevicePluginServer
	devices *deviceSet
}

func (p *devicePlugin) GetDevicePluginOptions(context.Context, *dp.Empty) (*dp.DevicePluginOptions, error) {
	return &dp.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}, nil
}

func (p *devicePlugin) ListAndWatch(_ *dp.Empty, stream dp.DevicePlugin_ListAndWatchServer) error {
	say("LISTANDWATCH")
	for {
		devices, changed := p.devices.snapshot()
		if err := stream.Send(&dp.ListAndWatchResponse{Devices: devices}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation prefers the highest-numbered devices, which no
// default choice of edgeplug's would make: a test sees that it was asked.
func (p *devicePlugin) GetPreferredAllocation(_ context.Context, request *dp.PreferredAllocationRequest) (*dp.PreferredAllocationResponse, error) {
	response := &dp.PreferredAllocationResponse{}
	for _, container := range request.ContainerRequests {
		chosen := append([]string{}, container.MustIncludeDeviceIDs...)
		rest := append([]string{}, container.AvailableDeviceIDs...)
		sort.Sort(sort.Reverse(sort.StringSlice(rest)))
		for _, id := range rest {
			if int32(len(chosen)) >= container.AllocationSize {
				break
			}
			if !contains(chosen, id) {
				chosen = append(chosen, id)
			}
		}
		say("PREFERRED %s", strings.Join(chosen, ","))
		response.ContainerResponses = append(response.ContainerResponses, &dp.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return response, nil
}

func (p *devicePlugin) Allocate(_ context.Context, request *dp.AllocateRequest) (*dp.AllocateResponse, error) {
	response := &dp.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		ids := strings.Join(container.DevicesIds, ",")
		say("ALLOCATE %s", ids)
		response.ContainerResponses = append(response.ContainerResponses, &dp.ContainerAllocateResponse{
			Envs: map[string]string{"GO_PLUGIN_DEVICES": ids},
		})
	}
	return response, nil
}

func (p *devicePlugin) PreStartContainer(_ context.Context, request *dp.PreStartContainerRequest) (*dp.PreStartContainerResponse, error) {
	say("PRESTART %s", strings.Join(request.DevicesIds, ","))
	return &dp.PreStartContainerResponse{}, nil
}

// watcherRegistration answers the plugin watcher when -registry is given.
type watcherRegistration struct {
	reg.UnimplementedRegistrationServer
	resource, endpoint string
}

func (r *watcherRegistration) GetInfo(context.Context, *reg.InfoRequest) (*reg.PluginInfo, error) {
	return &reg.PluginInfo{Type: "DevicePlugin", Name: r.resource, Endpoint: r.endpoint, SupportedVersions: []string{"v1beta1"}}, nil
}

func (r *watcherRegistration) NotifyRegistrationStatus(_ context.Context, status *reg.RegistrationStatus) (*reg.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		say("REGISTERED")
	} else {
		say("REGISTER_FAILED %s", status.Error)
	}
	return &reg.RegistrationStatusResponse{}, nil
}

func contains(list []string, wanted string) bool {
	for _, item := range list {
		if item == wanted {
			return true
		}
	}
	return false
}

// inodeOf is 0 when nothing is at the path.
func inodeOf(path string) uint64 {
	var stat syscall.Stat_t
	if err := syscall.Stat(path, &stat); err != nil {
		return 0
	}
	return stat.Ino
}

// dial is how device plugins reach the kubelet: the bare path as target.
func dial(ctx context.Context, socketPath string) (*grpc.ClientConn, error) {
	return grpc.DialContext(ctx, socketPath, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
}

type plugin struct {
	resource, kubeletSocket, socketPath string
	watcherMode                         bool
	devices                             *deviceSet
	server                              *grpc.Server
	servedInode                         uint64
}

func (p *plugin) serve() error {
	if p.server != nil {
		p.server.Stop()
	}
	if err := os.Remove(p.socketPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	listener, err := net.Listen("unix", p.socketPath)
	if err != nil {
		return err
	}
	p.server = grpc.NewServer()
	dp.RegisterDevicePluginServer(p.server, &devicePlugin{devices: p.devices})
	if p.watcherMode {
		reg.RegisterRegistrationServer(p.server, &watcherRegistration{resource: p.resource, endpoint: p.socketPath})
	}
	go p.server.Serve(listener)
	p.servedInode = inodeOf(p.socketPath)
	say("SERVING %s", p.socketPath)
	return nil
}

func (p *plugin) register() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dial(ctx, p.kubeletSocket)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = dp.NewRegistrationClient(conn).Register(ctx, &dp.RegisterRequest{
		Version:      "v1beta1",
		Endpoint:     filepath.Base(p.socketPath),
		ResourceName: p.resource,
		Options:      &dp.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
	})
	return err
}

// run serves and registers, then keeps doing so across restarts of the
// other side; a refused registration is tried again a second later.
func (p *plugin) run(stop <-chan os.Signal) {
	if err := p.serve(); err != nil {
		say("SERVE_FAILED %v", err)
		os.Exit(1)
	}
	var registeredWith uint64
	var retryAt time.Time
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		kubelet := uint64(0)
		if !p.watcherMode {
			kubelet = inodeOf(p.kubeletSocket)
		}
		restart := ""
		if inodeOf(p.socketPath) != p.servedInode {
			restart = "own socket removed"
		} else if registeredWith != 0 && kubelet != 0 && kubelet != registeredWith {
			restart = "kubelet.sock re-created"
		}
		if restart != "" {
			say("RESTART %s", restart)
			if err := p.serve(); err != nil {
				say("SERVE_FAILED %v", err)
				os.Exit(1)
			}
			registeredWith, retryAt = 0, time.Time{}
		}
		if !p.watcherMode && kubelet != 0 && registeredWith == 0 && !time.Now().Before(retryAt) {
			if err := p.register(); err != nil {
				say("REGISTER_FAILED %v", err)
				retryAt = time.Now().Add(time.Second)
			} else {
				registeredWith = kubelet
				say("REGISTERED")
			}
		}
		select {
		case <-ticker.C:
		case <-stop:
			p.server.Stop()
			say("STOPPED")
			return
		}
	}
}

func readCommands(devices *deviceSet) {
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		words := strings.Fields(lines.Text())
		if len(words) < 2 || (words[0] != "healthy" && words[0] != "unhealthy") {
			say("BAD_COMMAND %q", lines.Text())
			continue
		}
		health := "Healthy"
		if words[0] == "unhealthy" {
			health = "Unhealthy"
		}
		devices.setHealth(words[1:], health)
	}
}

func main() {
	pluginsDir := flag.String("plugins-dir", "", "the device-plugins directory holding kubelet.sock")
	registry := flag.String("registry", "", "register through the plugin watcher: serve the socket in this directory instead")
	resource := flag.String("resource", "example.com/dev", "the extended resource name")
	count := flag.Int("devices", 4, "how many devices")
	numaNodes := flag.Int("numa-nodes", 2, "devices are spread over this many NUMA nodes (0: no topology)")
	flag.Parse()
	if *pluginsDir == "" && *registry == "" {
		fmt.Fprintln(os.Stderr, "one of -plugins-dir or -registry is required")
		os.Exit(2)
	}
	socketDir := *pluginsDir
	if *registry != "" {
		socketDir = *registry
	}
	p := &plugin{
		resource:      *resource,
		kubeletSocket: filepath.Join(*pluginsDir, "kubelet.sock"),
		socketPath:    filepath.Join(socketDir, strings.ReplaceAll(*resource, "/", "_")+".sock"),
		watcherMode:   *registry != "",
		devices:       newDeviceSet(*resource, *count, *numaNodes),
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go readCommands(p.devices)
	p.run(stop)
}
