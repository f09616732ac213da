package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// IsCluster reports whether rawURL names a Redis Cluster: a redis:// or rediss:// URL whose
// query lists more seed nodes with addr= and names no Sentinel master, e.g.
// redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000.
func IsCluster(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has("addr") && !u.Query().Has("master_name")
}

// IsFailover reports whether rawURL names a Redis Sentinel deployment in go-redis's failover
// form: the host and any addr= are sentinels and master_name= names the master, e.g.
// redis://10.0.0.1:26379/0?master_name=mymaster&addr=10.0.0.2:26379.
func IsFailover(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has("master_name")
}

// Universal returns a function making a new client for rawURL at every call. It makes a
// cluster client for a URL IsCluster accepts, a client that follows the Sentinel master
// for a URL IsFailover accepts, and a single-node client otherwise. Each honours context
// deadlines. Errors never repeat the URL.
func Universal(rawURL string) (func() redis.UniversalClient, error) {
	return UniversalWithTLS(rawURL, TLSFiles{})
}

// NewClusterClient returns a cluster client on a copy of opt, with context deadlines
// honoured and maintenance notifications off, as NewClient does.
func NewClusterClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClusterClient(&o)
}

// NewFailoverClient returns a client that follows the master its sentinels name, on a copy
// of opt, with context deadlines honoured as in NewClient. It is a *redis.Client, so
// everything that runs on one node runs on it.
func NewFailoverClient(opt *redis.FailoverOptions) *redis.Client {
	o := *opt
	o.SentinelAddrs = append([]string(nil), opt.SentinelAddrs...)
	o.ContextTimeoutEnabled = true
	return redis.NewFailoverClient(&o)
}

// FailoverMaster asks the sentinels of a failover URL in turn for the address of the master
// they follow now. It returns the master's name and address. Errors never repeat the URL.
func FailoverMaster(ctx context.Context, rawURL string, files TLSFiles) (name, addr string, err error) {
	opt, err := failoverOptions(rawURL, files)
	if err != nil {
		return "", "", err
	}
	var errs []error
	for _, s := range opt.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s, Username: opt.SentinelUsername,
			Password: opt.SentinelPassword, TLSConfig: opt.TLSConfig, MaxRetries: -1,
			DialTimeout: opt.DialTimeout, ContextTimeoutEnabled: true})
		a, err := sc.GetMasterAddrByName(ctx, opt.MasterName).Result()
		_ = sc.Close()
		if err == nil && len(a) == 2 {
			return opt.MasterName, net.JoinHostPort(a[0], a[1]), nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", s, err))
	}
	return opt.MasterName, "", fmt.Errorf("redisconn: no sentinel names master %q: %w", opt.MasterName, errors.Join(errs...))
}

// failoverOptions parses a failover URL and applies files to its TLS configuration, which
// serves the sentinels and the master alike.
func failoverOptions(rawURL string, files TLSFiles) (*redis.FailoverOptions, error) {
	opt, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisconn: invalid Redis Sentinel URL: %w", redact(err, rawURL))
	}
	if opt.MasterName == "" {
		return nil, errors.New("redisconn: invalid Redis Sentinel URL: master_name is empty")
	}
	if opt.RouteByLatency || opt.RouteRandomly || opt.ReplicaOnly {
		// Reads from replicas would miss the master's last writes, and writes fail there.
		return nil, errors.New("redisconn: invalid Redis Sentinel URL: route_by_latency, route_randomly and replica_only are not supported: Flightdeck reads and writes the master")
	}
	if opt.TLSConfig, err = withTLSFiles(opt.TLSConfig, files); err != nil {
		return nil, err
	}
	return opt, nil
}

// Deployment names the Redis deployment rawURL points at, the same for every URL of it.
// The spool directory is per deployment, see flight.DeploymentSpoolDir. The name is
// "sentinel/<master>/<db>/<sentinel>,<sentinel>..." for a failover URL,
// "cluster/<node>,<node>..." for a cluster, and "<host:port>/<db>" for one node, with
// sentinels and nodes sorted. It is "" when the URL does not parse. It never holds a
// password.
func Deployment(rawURL string) string {
	switch {
	case IsFailover(rawURL):
		if o, err := redis.ParseFailoverURL(rawURL); err == nil {
			return "sentinel/" + o.MasterName + "/" + strconv.Itoa(o.DB) + "/" + sortedList(o.SentinelAddrs)
		}
	case IsCluster(rawURL):
		if o, err := redis.ParseClusterURL(rawURL); err == nil {
			return "cluster/" + sortedList(o.Addrs)
		}
	default:
		if o, err := redis.ParseURL(rawURL); err == nil {
			return o.Addr + "/" + strconv.Itoa(o.DB)
		}
	}
	return ""
}

// ClientDeployment is Deployment for a client. It gives the same name as its URL's for one
// node or a cluster. It gives "" for a Sentinel failover client, whose master name and
// sentinels a *redis.Client does not show. Name such a deployment from the URL, as the
// consumer binary does.
func ClientDeployment(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return "cluster/" + sortedList(c.Options().Addrs)
	case *redis.Client:
		if o := c.Options(); o.Addr != "FailoverClient" {
			return o.Addr + "/" + strconv.Itoa(o.DB)
		}
	}
	return ""
}

// sortedList joins a sorted copy of addrs with commas.
func sortedList(addrs []string) string {
	s := slices.Clone(addrs)
	slices.Sort(s)
	return strings.Join(s, ",")
}
