<?php
// The tally tour in PHP over the Redis protocol with phpredis (Debian's php-redis): plain
// counters with its commands, derived counters with tally's COUNTER.* commands; a counter
// followed live over the HTTP API's event stream.
//
//   TALLY_HOST=127.0.0.1 TALLY_PORT=6380 TALLY_HTTP_PORT=6381 php tour.php
//
// Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
// ../expected-output.txt.
declare(strict_types=1);

const DEFINITIONS = <<<'SQL'
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
SQL;

// A change: post $id was created, published.
function post(int $id, int $userId, int $blogId): array
{
    return ['source' => 'posts',
            'new' => ['id' => $id, 'user_id' => $userId, 'blog_id' => $blogId, 'is_published' => true]];
}

// COUNTER.SCAN and COUNTER.TOP answer [key, value, key, value, ...].
function pairs(array $flat): string
{
    $out = [];
    foreach (array_chunk($flat, 2) as [$key, $value]) {
        $out[] = "$key=$value";
    }
    return implode(' ', $out);
}

function connect(): Redis
{
    $redis = new Redis();
    $redis->connect(getenv('TALLY_HOST') ?: '127.0.0.1', (int) (getenv('TALLY_PORT') ?: 6380), 5.0);
    $redis->setOption(Redis::OPT_READ_TIMEOUT, 10);
    return $redis;
}

$redis = connect();

// 1. A hot counter: many increments, one exact read (no shards to sum).
$pipe = $redis->pipeline();
for ($i = 0; $i < 100; $i++) {
    $pipe->incr('likes:post:7');
}
$pipe->exec();
echo 'likes:post:7 = ', $redis->get('likes:post:7'), " after 100 increments\n";

// 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
$verdicts = [];
for ($i = 0; $i < 5; $i++) {
    $calls = $redis->rawCommand('INCRBYEX', 'api:calls:alice', 1, 'EX', 60, 'NX');
    $verdicts[] = $calls <= 3 ? 'allowed' : 'denied';
}
echo 'rate limit api:calls:alice, 3 a minute: ', implode(' ', $verdicts), "\n";

// 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A change
//    sent again with the same id is counted once.
echo 'definitions: ', implode(', ', $redis->rawCommand('COUNTER.DEFINE', DEFINITIONS)), "\n";
foreach (['push', 'resend'] as $label) {
    [, $applied, $duplicates] = $redis->rawCommand('COUNTER.PUSH', 'ID', 'post-1', json_encode(post(1, 3, 7)));
    echo "$label post-1: applied $applied, duplicates $duplicates\n";
}
$batch = [post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)];
[, $applied, $duplicates] = $redis->rawCommand('COUNTER.PUSH', 'ID', 'posts-2-4', json_encode($batch));
echo "push posts 2-4: applied $applied, duplicates $duplicates\n";
echo 'blog_posts:7:3 = ', $redis->rawCommand('COUNTER.GET', 'blog_posts', 7, 3), "\n";

// 4. A family (every author of blog 7, a page of up to 100) and its top-K.
[, $family] = $redis->rawCommand('COUNTER.SCAN', 'blog_posts', 0, 100, 7);
echo 'family blog_posts:7: ', pairs($family), "\n";
echo 'top 1 of blog 7: ', pairs($redis->rawCommand('COUNTER.TOP', 'blog_posts', 1, 7)), "\n";

// 5. Follow a counter live: its current value first, then each new value, here as the HTTP
//    API's event stream (phpredis 5's subscribe loop cannot be left from its callback).
$api = sprintf('http://%s:%s', getenv('TALLY_HOST') ?: '127.0.0.1', getenv('TALLY_HTTP_PORT') ?: 6381);
$events = fopen("$api/v1/events?key=likes:post:7", 'r', false,
                stream_context_create(['http' => ['timeout' => 10]]));
$seen = [];
while (count($seen) < 3 && ($line = fgets($events)) !== false) {
    if (str_starts_with($line, 'data: ')) {
        $seen[] = json_decode(substr($line, 6), true)['value'];
        if (count($seen) < 3) {
            $redis->incr('likes:post:7');
        }
    }
}
fclose($events);
echo 'live likes:post:7: ', implode(' ', $seen), "\n";
