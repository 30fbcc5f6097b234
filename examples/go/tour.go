// The tally tour in Go with the standard library: derived counters and live values over the
// HTTP API (net/http, encoding/json); plain counters (INCR, INCRBYEX) over the Redis
// protocol, which is the only one that has them: Debian packages no Redis client for Go, so
// a few lines of net and bufio speak it here (an app would use a client such as go-redis).
//
//	TALLY_HOST=127.0.0.1 TALLY_PORT=6380 TALLY_HTTP_PORT=6381 go run .
//
// Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
// ../expected-output.txt.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const definitions = `
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
`

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

var (
	host   = env("TALLY_HOST", "127.0.0.1")
	api    = "http://" + net.JoinHostPort(host, env("TALLY_HTTP_PORT", "6381"))
	client = &http.Client{Timeout: 10 * time.Second}
)

// call sends one request to the HTTP API and decodes its JSON reply into out.
func call(method, path string, body any, headers map[string]string, out any) {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case string:
		payload = []byte(b)
	default:
		payload, _ = json.Marshal(b)
	}
	request, err := http.NewRequest(method, api+path, bytes.NewReader(payload))
	if err != nil {
		log.Fatal(err)
	}
	for name, value := range headers {
		request.Header.Set(name, value)
	}
	response, err := client.Do(request)
	if err != nil {
		log.Fatal(err)
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		var failure struct{ Error string }
		json.NewDecoder(response.Body).Decode(&failure)
		log.Fatalf("%s %s: %d %s", method, path, response.StatusCode, failure.Error)
	}
	if err := json.NewDecoder(response.Body).Decode(out); err != nil {
		log.Fatal(err)
	}
}

// redisConn is one Redis-protocol connection: a command out, its reply (an integer or a
// string) back.
type redisConn struct {
	conn   net.Conn
	reader *bufio.Reader
}

func dialRedis() *redisConn {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, env("TALLY_PORT", "6380")), 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	return &redisConn{conn, bufio.NewReader(conn)}
}

func (r *redisConn) do(args ...string) string {
	var command strings.Builder
	fmt.Fprintf(&command, "*%d\r\n", len(args))
	for _, arg := range args {
		fmt.Fprintf(&command, "$%d\r\n%s\r\n", len(arg), arg)
	}
	r.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.conn.Write([]byte(command.String())); err != nil {
		log.Fatal(err)
	}
	line, err := r.reader.ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case ':', '+': // an integer, a status
		return line[1:]
	case '$': // a string of that length, or none (-1)
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return ""
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r.reader, data); err != nil {
			log.Fatal(err)
		}
		return string(data[:n])
	}
	log.Fatalf("%s: %s", args[0], line)
	return ""
}

type keyValue struct {
	Key   string `json:"key"`
	Value int64  `json:"value"`
}

type pushResult struct {
	Applied    int `json:"applied"`
	Duplicates int `json:"duplicates"`
}

func pairs(items []keyValue) string {
	out := make([]string, len(items))
	for i, item := range items {
		out[i] = fmt.Sprintf("%s=%d", item.Key, item.Value)
	}
	return strings.Join(out, " ")
}

// post is a change: post id was created, published.
func post(id, userID, blogID int) map[string]any {
	return map[string]any{"source": "posts", "new": map[string]any{
		"id": id, "user_id": userID, "blog_id": blogID, "is_published": true}}
}

func main() {
	// 1. A hot counter: 10 goroutines increment it 10 times each, one exact read.
	var writers sync.WaitGroup
	for w := 0; w < 10; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			conn := dialRedis()
			defer conn.conn.Close()
			for i := 0; i < 10; i++ {
				conn.do("INCR", "likes:post:7")
			}
		}()
	}
	writers.Wait()
	redis := dialRedis()
	defer redis.conn.Close()
	fmt.Printf("likes:post:7 = %s after 100 increments\n", redis.do("GET", "likes:post:7"))

	// 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
	var verdicts []string
	for i := 0; i < 5; i++ {
		calls, _ := strconv.Atoi(redis.do("INCRBYEX", "api:calls:alice", "1", "EX", "60", "NX"))
		if calls <= 3 {
			verdicts = append(verdicts, "allowed")
		} else {
			verdicts = append(verdicts, "denied")
		}
	}
	fmt.Printf("rate limit api:calls:alice, 3 a minute: %s\n", strings.Join(verdicts, " "))

	// 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A
	//    change sent again with the same idempotency key is counted once.
	var defined struct{ Results []string }
	call("POST", "/v1/definitions", definitions, nil, &defined)
	fmt.Printf("definitions: %s\n", strings.Join(defined.Results, ", "))
	for _, label := range []string{"push", "resend"} {
		var pushed pushResult
		call("POST", "/v1/changes", post(1, 3, 7), map[string]string{"Idempotency-Key": "post-1"}, &pushed)
		fmt.Printf("%s post-1: applied %d, duplicates %d\n", label, pushed.Applied, pushed.Duplicates)
	}
	var batch pushResult
	call("POST", "/v1/changes?id=posts-2-4", []any{post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)}, nil, &batch)
	fmt.Printf("push posts 2-4: applied %d, duplicates %d\n", batch.Applied, batch.Duplicates)
	var group keyValue
	call("GET", "/v1/value/blog_posts/7/3", nil, nil, &group)
	fmt.Printf("%s = %d\n", group.Key, group.Value)

	// 4. A family (every author of blog 7) and its top-K.
	var family, top struct{ Items []keyValue }
	call("GET", "/v1/list/blog_posts/7", nil, nil, &family)
	fmt.Printf("family blog_posts:7: %s\n", pairs(family.Items))
	call("GET", "/v1/top/blog_posts/7?k=1", nil, nil, &top)
	fmt.Printf("top 1 of blog 7: %s\n", pairs(top.Items))

	// 5. Follow a counter live over Server-Sent Events: its current value first, then each
	//    new value.
	events, err := client.Get(api + "/v1/events?key=likes:post:7")
	if err != nil {
		log.Fatal(err)
	}
	defer events.Body.Close()
	var seen []string
	lines := bufio.NewScanner(events.Body)
	for len(seen) < 3 && lines.Scan() {
		if !strings.HasPrefix(lines.Text(), "data: ") {
			continue
		}
		var update keyValue
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines.Text(), "data: ")), &update); err != nil {
			log.Fatal(err)
		}
		seen = append(seen, strconv.FormatInt(update.Value, 10))
		if len(seen) < 3 {
			redis.do("INCR", "likes:post:7")
		}
	}
	fmt.Printf("live likes:post:7: %s\n", strings.Join(seen, " "))
}
