package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A client is one keep-alive HTTP/1.1 connection to the server, used by one
// goroutine. It writes requests and reads answers itself, without the
// goroutines and pools of net/http's client, so that crmd-bench spends little
// of the machine it shares with the server and the figures are the server's.
type client struct {
	addr string // host:port
	host string // the Host header
	auth string // the Authorization header
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

// newClient returns a client of the server at base, an http:// URL.
func newClient(base, key string) (*client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("--url must be an http:// URL of a crmd server, not %q", base)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &client{addr: addr, host: u.Host, auth: "Bearer " + key}, nil
}

// roundTrip sends one request and returns the status and the whole body. A
// connection that fails or that the server closes is dialled anew for the
// next request.
func (c *client) roundTrip(method, target string, body []byte) (int, []byte, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, requestTimeout)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.r, c.w = conn, bufio.NewReaderSize(conn, 64<<10), bufio.NewWriterSize(conn, 8<<10)
	}
	c.conn.SetDeadline(time.Now().Add(requestTimeout))
	c.w.WriteString(method + " " + target + " HTTP/1.1\r\nHost: " + c.host + "\r\nAuthorization: " + c.auth + "\r\nAccept: application/json\r\n")
	if body != nil {
		c.w.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	c.w.WriteString("\r\n")
	c.w.Write(body)
	if err := c.w.Flush(); err != nil {
		c.close()
		return 0, nil, err
	}
	status, data, keep, err := readResponse(c.r)
	if err != nil || !keep {
		c.close()
	}
	return status, data, err
}

// readResponse reads one HTTP/1.1 response: its status, its body (sized by
// Content-Length or chunked), and whether the connection stays open. It
// reads what crmd sends and refuses anything else.
func readResponse(r *bufio.Reader) (status int, body []byte, keep bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, false, fmt.Errorf("malformed status line %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, nil, false, fmt.Errorf("malformed status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, false, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		return status, nil, keep, nil
	case chunked:
		body, err = readChunked(r)
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	default:
		body, err = io.ReadAll(r)
		keep = false
	}
	return status, body, keep, err
}

func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("malformed chunk size %q", line)
		}
		if size == 0 {
			_, err := r.ReadSlice('\n') // the blank line after the last chunk
			return body, err
		}
		n := len(body)
		body = append(body, make([]byte, size+2)...)
		if _, err := io.ReadFull(r, body[n:]); err != nil {
			return nil, err
		}
		body = body[:len(body)-2] // the chunk's CRLF
	}
}

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends req and checks its answer: a status outside 2xx, a body that is
// not a JSON object (a 204 has none), and a failed check are errors.
func (c *client) do(req request) (answer, error) {
	var a answer
	status, data, err := c.roundTrip(req.method, req.target, req.body)
	switch {
	case err != nil:
		return a, fmt.Errorf("%s: %w", req.method, err)
	case status < 200 || status > 299:
		return a, fmt.Errorf("%s: %w", req.method, &statusError{status: status, body: data})
	case status != http.StatusNoContent:
		if a, err = parseAnswer(data, req.records); err != nil {
			return a, fmt.Errorf("%s: status %d with a body that is not a JSON object: %w", req.method, status, err)
		}
	}
	if req.check != nil {
		if err := req.check(a); err != nil {
			return a, fmt.Errorf("%s: %w", req.method, err)
		}
	}
	return a, nil
}

// parseAnswer reads the parts of an answer crmd-bench looks at. A record
// (small) is decoded whole. A list page is read up to its records, whose ids
// are decoded only when records is true: checking the framing and the head
// of a 50 KB page, rather than decoding all of it, keeps the load tool's cost
// per request well below the server's.
func parseAnswer(data []byte, records bool) (answer, error) {
	var a answer
	if len(data) < 4096 || records {
		err := json.Unmarshal(data, &a)
		return a, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return a, errors.New("does not start with {")
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return a, err
		}
		switch key {
		case "count":
			if err := dec.Decode(&a.Count); err != nil {
				return a, err
			}
		case "records":
			if !bytes.HasSuffix(bytes.TrimSpace(data), []byte("]}")) {
				return a, errors.New("the records array does not close the object")
			}
			return a, nil
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return a, err
			}
		}
	}
	return a, nil
}
