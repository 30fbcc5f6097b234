#!/usr/bin/env ruby
# frozen_string_literal: true

# The tally tour in Ruby, all over the Redis protocol with redis-rb (Debian's ruby-redis):
# plain counters with its commands, derived counters with tally's COUNTER.* commands.
#
#   TALLY_HOST=127.0.0.1 TALLY_PORT=6380 ruby tour.rb
#
# Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
# ../expected-output.txt.
require 'json'
require 'redis'

DEFINITIONS = <<~SQL
  CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
  CREATE COUNTER blog_posts AS
    SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
SQL

# A change: post `id` was created, published.
def post(id, user_id, blog_id)
  { source: 'posts', new: { id: id, user_id: user_id, blog_id: blog_id, is_published: true } }
end

# COUNTER.SCAN and COUNTER.TOP answer [key, value, key, value, ...].
def pairs(flat)
  flat.each_slice(2).map { |key, value| "#{key}=#{value}" }.join(' ')
end

options = { host: ENV.fetch('TALLY_HOST', '127.0.0.1'), port: Integer(ENV.fetch('TALLY_PORT', '6380')),
            timeout: 10 }
redis = Redis.new(**options)

# 1. A hot counter: many increments, one exact read (no shards to sum).
redis.pipelined { |pipe| 100.times { pipe.incr('likes:post:7') } }
puts "likes:post:7 = #{redis.get('likes:post:7')} after 100 increments"

# 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
verdicts = Array.new(5) do
  calls = redis.call('INCRBYEX', 'api:calls:alice', 1, 'EX', 60, 'NX')
  calls <= 3 ? 'allowed' : 'denied'
end
puts "rate limit api:calls:alice, 3 a minute: #{verdicts.join(' ')}"

# 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A change
#    sent again with the same id is counted once.
puts "definitions: #{redis.call('COUNTER.DEFINE', DEFINITIONS).join(', ')}"
%w[push resend].each do |label|
  _changes, applied, duplicates, _keys = redis.call('COUNTER.PUSH', 'ID', 'post-1', post(1, 3, 7).to_json)
  puts "#{label} post-1: applied #{applied}, duplicates #{duplicates}"
end
batch = [post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)]
_changes, applied, duplicates, _keys = redis.call('COUNTER.PUSH', 'ID', 'posts-2-4', batch.to_json)
puts "push posts 2-4: applied #{applied}, duplicates #{duplicates}"
puts "blog_posts:7:3 = #{redis.call('COUNTER.GET', 'blog_posts', 7, 3)}"

# 4. A family (every author of blog 7, a page of up to 100) and its top-K.
_cursor, family = redis.call('COUNTER.SCAN', 'blog_posts', 0, 100, 7)
puts "family blog_posts:7: #{pairs(family)}"
puts "top 1 of blog 7: #{pairs(redis.call('COUNTER.TOP', 'blog_posts', 1, 7))}"

# 5. Follow a counter live: its current value first, then each new value. A subscribed
#    connection takes no other commands, hence a second one.
seen = []
subscriber = Redis.new(**options)
subscriber.subscribe_with_timeout(10, 'likes:post:7') do |on|
  on.message do |_channel, value|
    seen << value
    if seen.size == 3
      subscriber.unsubscribe # the last channel: subscribe returns
    else
      redis.incr('likes:post:7')
    end
  end
end
puts "live likes:post:7: #{seen.join(' ')}"
