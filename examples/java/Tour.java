// The tally tour in Java: derived counters and live values over the HTTP API with the JDK's
// java.net.http.HttpClient (JSON by Jackson, Debian's libjackson2-databind-java); plain
// counters (INCR, INCRBYEX) over the Redis protocol, which is the only one that has them:
// Debian packages no Redis client for Java, so a few lines on a java.net.Socket speak it here
// (an app would use a client such as Jedis or Lettuce).
//
//   CP=/usr/share/java/jackson-databind.jar:/usr/share/java/jackson-core.jar:/usr/share/java/jackson-annotations.jar
//   TALLY_HOST=127.0.0.1 TALLY_PORT=6380 TALLY_HTTP_PORT=6381 java -cp $CP Tour.java
//
// Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
// ../expected-output.txt.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

public class Tour {
  static final String DEFINITIONS = """
      CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
      CREATE COUNTER blog_posts AS
        SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
      """;

  static final String HOST = env("TALLY_HOST", "127.0.0.1");
  static final int PORT = Integer.parseInt(env("TALLY_PORT", "6380"));
  static final String API = "http://" + HOST + ":" + env("TALLY_HTTP_PORT", "6381");
  static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
  static final ObjectMapper JSON = new ObjectMapper();

  static String env(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }

  /** One call to the HTTP API: its JSON reply; an error status throws with tally's message. */
  static JsonNode call(String method, String path, Object body, String... headers)
      throws IOException, InterruptedException {
    String text = body == null ? "" : body instanceof String s ? s : JSON.writeValueAsString(body);
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(API + path))
        .timeout(Duration.ofSeconds(10))
        .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                                     : HttpRequest.BodyPublishers.ofString(text));
    if (headers.length > 0) request.headers(headers);
    HttpResponse<String> response = HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
    JsonNode reply = JSON.readTree(response.body());
    if (response.statusCode() != 200) {
      throw new IOException(method + " " + path + ": " + response.statusCode() + " "
                            + reply.path("error").asText());
    }
    return reply;
  }

  /** One Redis-protocol connection: a command out, its reply (an integer or a string) back. */
  static final class Redis implements AutoCloseable {
    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;

    Redis() throws IOException {
      socket = new Socket(HOST, PORT);
      socket.setSoTimeout(10000);
      in = new BufferedInputStream(socket.getInputStream());
      out = socket.getOutputStream();
    }

    String call(Object... args) throws IOException {
      StringBuilder command = new StringBuilder("*" + args.length + "\r\n");
      for (Object arg : args) {
        byte[] bytes = arg.toString().getBytes(StandardCharsets.UTF_8);
        command.append('$').append(bytes.length).append("\r\n").append(arg).append("\r\n");
      }
      out.write(command.toString().getBytes(StandardCharsets.UTF_8));
      String line = readLine();
      switch (line.charAt(0)) {
        case ':', '+': return line.substring(1);  // an integer, a status
        case '$': {  // a string of that length, or none (-1)
          int length = Integer.parseInt(line.substring(1));
          if (length < 0) return null;
          String data = new String(in.readNBytes(length), StandardCharsets.UTF_8);
          in.readNBytes(2);
          return data;
        }
        default: throw new IOException(args[0] + ": " + line);
      }
    }

    private String readLine() throws IOException {
      ByteArrayOutputStream line = new ByteArrayOutputStream();
      for (int c; (c = in.read()) != '\n'; ) {
        if (c < 0) throw new IOException("connection closed");
        if (c != '\r') line.write(c);
      }
      return line.toString(StandardCharsets.UTF_8);
    }

    @Override
    public void close() throws IOException {
      socket.close();
    }
  }

  /** A change: post id was created, published. */
  static Map<String, Object> post(int id, int userId, int blogId) {
    return Map.of("source", "posts",
                  "new", Map.of("id", id, "user_id", userId, "blog_id", blogId, "is_published", true));
  }

  static String pairs(JsonNode items) {
    return StreamSupport.stream(items.spliterator(), false)
        .map(item -> item.get("key").asText() + "=" + item.get("value").asLong())
        .collect(Collectors.joining(" "));
  }

  public static void main(String[] args) throws Exception {
    // 1. A hot counter: 10 threads increment it 10 times each, one exact read.
    Callable<Void> writer = () -> {
      try (Redis redis = new Redis()) {
        for (int i = 0; i < 10; i++) redis.call("INCR", "likes:post:7");
      }
      return null;
    };
    ExecutorService writers = Executors.newFixedThreadPool(10);
    for (Future<Void> done : writers.invokeAll(Collections.nCopies(10, writer))) done.get();
    writers.shutdown();
    try (Redis redis = new Redis()) {
      System.out.println("likes:post:7 = " + redis.call("GET", "likes:post:7") + " after 100 increments");

      // 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
      List<String> verdicts = new ArrayList<>();
      for (int i = 0; i < 5; i++) {
        long calls = Long.parseLong(redis.call("INCRBYEX", "api:calls:alice", 1, "EX", 60, "NX"));
        verdicts.add(calls <= 3 ? "allowed" : "denied");
      }
      System.out.println("rate limit api:calls:alice, 3 a minute: " + String.join(" ", verdicts));

      // 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A
      //    change sent again with the same idempotency key is counted once.
      JsonNode defined = call("POST", "/v1/definitions", DEFINITIONS).get("results");
      System.out.println("definitions: " + StreamSupport.stream(defined.spliterator(), false)
          .map(JsonNode::asText).collect(Collectors.joining(", ")));
      for (String label : List.of("push", "resend")) {
        JsonNode pushed = call("POST", "/v1/changes", post(1, 3, 7), "Idempotency-Key", "post-1");
        System.out.println(label + " post-1: applied " + pushed.get("applied") + ", duplicates "
                           + pushed.get("duplicates"));
      }
      JsonNode batch = call("POST", "/v1/changes?id=posts-2-4",
                            List.of(post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)));
      System.out.println("push posts 2-4: applied " + batch.get("applied") + ", duplicates "
                         + batch.get("duplicates"));
      JsonNode group = call("GET", "/v1/value/blog_posts/7/3", null);
      System.out.println(group.get("key").asText() + " = " + group.get("value"));

      // 4. A family (every author of blog 7) and its top-K.
      System.out.println("family blog_posts:7: "
                         + pairs(call("GET", "/v1/list/blog_posts/7", null).get("items")));
      System.out.println("top 1 of blog 7: "
                         + pairs(call("GET", "/v1/top/blog_posts/7?k=1", null).get("items")));

      // 5. Follow a counter live over Server-Sent Events: its current value first, then each
      //    new value.
      HttpRequest events = HttpRequest.newBuilder(URI.create(API + "/v1/events?key=likes:post:7")).build();
      List<String> seen = new ArrayList<>();
      try (Stream<String> lines = HTTP.send(events, HttpResponse.BodyHandlers.ofLines()).body()) {
        Iterator<String> it = lines.iterator();
        while (seen.size() < 3 && it.hasNext()) {
          String line = it.next();
          if (!line.startsWith("data: ")) continue;
          seen.add(JSON.readTree(line.substring("data: ".length())).get("value").asText());
          if (seen.size() < 3) redis.call("INCR", "likes:post:7");
        }
      }
      System.out.println("live likes:post:7: " + String.join(" ", seen));
    }
  }
}
