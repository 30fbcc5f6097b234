// The spellings of a timestamp that tally's readers meet, and what each reader makes of
// them: one table for the tests of every reader (pushed change cells, key parts, stored
// keys, range instants, PostgreSQL's text), so that they cannot drift apart unnoticed.
#pragma once

#include <cstdint>
#include <string_view>

namespace tally::timestamp_cases {

// The readers of a timestamp, as flags.
enum Reader : uint8_t {
  kJson = 1 << 0,           // a cell of a pushed change (derived/change_json.h)
  kKeyPart = 1 << 1,        // a key part of a read (derived::ParseKeyPart)
  kStoredKey = 1 << 2,      // the time bucket of a stored key (CompiledCounter::BucketOfKey)
  kInstant = 1 << 3,        // from and to of a range read (DerivedCounters::Range)
  kPgDate = 1 << 4,         // PostgreSQL's text of a date (postgres::ParsePgText)
  kPgTimestamp = 1 << 5,    // ... of a timestamp
  kPgTimestamptz = 1 << 6,  // ... of a timestamptz
  kReads = kKeyPart | kInstant,
};

// One spelling: the readers that take it, and the instant it means to them (all agree),
// as FormatTimestamp writes it; empty when no reader takes it. Texts with ':' cannot be a
// part of a stored key (':' separates parts); for kStoredKey they are not tried.
struct Case {
  std::string_view text;
  std::string_view instant;
  uint8_t readers;
};

inline constexpr Case kCases[] = {
    // ISO 8601 extended: a date, a time after 'T' or a space, seconds optional.
    {"2024-05-01", "20240501T000000Z", kJson | kReads | kPgDate},
    {"2024-05-01T13:45", "20240501T134500Z", kJson | kReads},
    {"2024-05-01 13:45", "20240501T134500Z", kJson | kReads},
    {"2024-05-01 00:00:00", "20240501T000000Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01 13:45:07", "20240501T134507Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01T13:45:07", "20240501T134507Z", kJson | kReads},
    {"2024-05-01T13:45:07Z", "20240501T134507Z", kJson | kReads},
    {"2024-05-01 13:45:07Z", "20240501T134507Z", kJson | kReads},
    {"2024-05-01t13:45:07z", "20240501T134507Z", kJson | kReads},
    {"2024-05-01T00:00:00Z", "20240501T000000Z", kJson | kReads},
    {"1970-01-01T00:00:00Z", "19700101T000000Z", kJson | kReads},
    {"", "", 0},
    {"2024", "19700101T003344Z", kInstant},
    {"2024-5-1", "", 0},
    {"2024-05-1", "", 0},
    {"2024-5-01", "", 0},
    {"24-05-01", "", 0},
    {"+2024-05-01", "", 0},
    {"2024/05/01", "", 0},
    {"05/01/2024", "", 0},
    {" 2024-05-01", "", 0},
    {"2024-05-01 ", "", 0},
    {"2024-05-01Z", "", 0},
    {"2024-05-01T", "", 0},
    {"2024-05-01T12", "", 0},
    {"2024-05-01T1:00", "", 0},
    {"yesterday", "", 0},
    {"x", "", 0},

    // Fractions of a second: more than six digits are rounded to the microsecond.
    {"2024-05-01T13:45:07.5", "20240501T134507.500000Z", kJson | kReads},
    {"2024-05-01 13:45:07.5", "20240501T134507.500000Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01T13:45:07.000001Z", "20240501T134507.000001Z", kJson | kReads},
    {"2024-05-01 13:45:07.000001", "20240501T134507.000001Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01T13:45:07.123456Z", "20240501T134507.123456Z", kJson | kReads},
    {"2024-05-01 13:45:07.123456", "20240501T134507.123456Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01T13:45:07.1234567Z", "20240501T134507.123457Z", kJson | kReads},
    {"2024-05-01 13:45:07.1234567", "20240501T134507.123457Z", kJson | kReads},
    {"2024-05-01T13:45:07.123456789Z", "20240501T134507.123457Z", kJson | kReads},
    {"2024-05-01T13:45:07.1234561Z", "20240501T134507.123456Z", kJson | kReads},
    {"2024-05-01T23:59:59.9999999Z", "20240502T000000Z", kJson | kReads},
    {"2024-05-01T12:00:00.123456789012345678", "20240501T120000.123457Z", kJson | kReads},
    {"2024-05-01T12:00:00.1234567890123456789", "", 0},
    {"1969-12-31T23:59:59.999999", "19691231T235959.999999Z", kJson | kReads},
    {"1969-12-31 23:59:59.999999", "19691231T235959.999999Z", kJson | kReads | kPgTimestamp},
    {"2024-05-01T12:00:00.", "", 0},
    {"2024-05-01 13:45:07.", "", 0},
    {"2024-05-01T12:00:00,5", "", 0},
    {"2024-05-01T12:00:00.5.5", "", 0},

    // Offsets: the local time minus the offset is UTC.
    {"2024-05-01T13:45:00+02:00", "20240501T114500Z", kJson | kReads},
    {"2024-05-01T13:45:07+02:00", "20240501T114507Z", kJson | kReads},
    {"2024-05-01 13:45:07+02", "20240501T114507Z", kJson | kReads | kPgTimestamptz},
    {"2024-05-01T13:45:00+0200", "20240501T114500Z", kJson | kReads},
    {"2024-05-01T13:45:00+02", "20240501T114500Z", kJson | kReads},
    {"2024-05-01T01:15:00-05:30", "20240501T064500Z", kJson | kReads},
    {"2024-05-01T00:30:00+01:00", "20240430T233000Z", kJson | kReads},
    {"2024-05-01T13:45+02:00", "20240501T114500Z", kJson | kReads},
    {"2024-05-01 13:45:07.123456+00", "20240501T134507.123456Z", kJson | kReads | kPgTimestamptz},
    {"2024-05-01 15:45:07.123456+02", "20240501T134507.123456Z", kJson | kReads | kPgTimestamptz},
    {"2024-05-01 19:15:07.123456+05:30", "20240501T134507.123456Z",
     kJson | kReads | kPgTimestamptz},
    {"2024-05-01 10:15:07.123456-03:30", "20240501T134507.123456Z",
     kJson | kReads | kPgTimestamptz},
    {"1970-01-01 00:30:00+01", "19691231T233000Z", kJson | kReads | kPgTimestamptz},
    {"1900-01-01 00:00:00+05:53:28", "18991231T180632Z", kPgTimestamptz},
    {"1900-01-01T00:00:00+05:53:28", "", 0},
    {"2024-05-01T12:00+15:59", "20240430T200100Z", kJson | kReads},
    {"2024-05-01 12:00:00+15:59:59", "20240430T200001Z", kPgTimestamptz},
    {"2024-05-01T12:00+16:00", "", 0},
    {"2024-05-01 12:00:00+16", "20240430T200000Z", kPgTimestamptz},
    {"2024-05-01 12:00:00+23:59", "20240430T120100Z", kPgTimestamptz},
    {"2024-05-01 12:00:00+24", "", 0},
    {"2024-05-01T12:00+01:60", "", 0},
    {"2024-05-01 13:45:07+02:60", "", 0},
    {"2024-05-01 12:00:00+01:00:60", "", 0},
    {"2024-05-01T12:00+1", "", 0},
    {"2024-05-01 13:45:07+2", "", 0},
    {"2024-05-01T12:00+01:", "", 0},
    {"2024-05-01T12:00+01:0", "", 0},
    {"2024-05-01 13:45:07+02:3", "", 0},
    {"2024-05-01 13:45:07+02:30:", "", 0},
    {"2024-05-01 13:45:07 +02", "", 0},
    {"2024-05-01T12:00Z+", "", 0},
    {"2024-05-01T12:00:00Zjunk", "", 0},
    {"2024-05-01T12:00:00 UTC", "", 0},

    // The calendar: leap days, days of a month, fields out of range; PostgreSQL's 24:00:00
    // (the end of the day) and leap second (the first second of the next minute).
    {"2024-02-29", "20240229T000000Z", kJson | kReads | kPgDate},
    {"2000-02-29", "20000229T000000Z", kJson | kReads | kPgDate},
    {"1970-01-01", "19700101T000000Z", kJson | kReads | kPgDate},
    {"1969-12-31", "19691231T000000Z", kJson | kReads | kPgDate},
    {"2023-02-29", "", 0},
    {"1900-02-29", "", 0},
    {"2024-04-31", "", 0},
    {"2024-13-01", "", 0},
    {"2024-00-10", "", 0},
    {"2024-05-00", "", 0},
    {"2024-05-01T24:00:00", "20240502T000000Z", kJson | kReads},
    {"2024-05-01 24:00:00", "20240502T000000Z", kJson | kReads},
    {"2024-05-01T24:00:01", "", 0},
    {"2024-05-01T24:00:00.5", "", 0},
    {"2024-05-01T24:01", "", 0},
    {"2024-05-01T25:00", "", 0},
    {"2016-12-31T23:59:60Z", "20170101T000000Z", kJson | kReads},
    {"2016-12-31 23:59:60", "20170101T000000Z", kJson | kReads},
    {"2016-12-31T23:59:60.5Z", "20170101T000000.500000Z", kJson | kReads},
    {"2024-05-01T12:60", "", 0},
    {"2024-05-01 13:60:00", "", 0},
    {"2024-05-01T12:00:61", "", 0},
    {"2024-05-01 13:45:61", "", 0},

    // Years: the first and last of four digits, more digits, the int64 range's end.
    {"0001-01-01", "00010101T000000Z", kJson | kReads | kPgDate},
    {"0000-01-01", "00000101T000000Z", kPgDate},
    {"9999-12-31T23:59:59.999999", "99991231T235959.999999Z", kJson | kReads},
    {"10000-01-01", "+100000101T000000Z", kPgDate},
    {"10000-01-01 00:00:00", "+100000101T000000Z", kPgTimestamp},
    {"294247-01-10 04:00:54.775807", "+2942470110T040054.775807Z", kPgTimestamp},
    {"294247-01-10 04:00:54.775808", "", 0},
    {"294276-12-31 23:59:59.999999", "", 0},
    {"5874897-12-31", "", 0},
    {"12345678-01-01", "", 0},

    // PostgreSQL's infinities and dates before the common era.
    {"infinity", "", 0},
    {"-infinity", "", 0},
    {"0044-03-15 BC", "", 0},
    {"2024-05-01 13:45:07 BC", "", 0},
    {"0044-03-15 12:00:00+00:53:28 BC", "", 0},

    // The key spelling, ISO 8601 basic as FormatTimestamp writes it: a sign and more digits
    // for years outside 0000-9999 (0000 is 1 BC, -0044 is 45 BC).
    {"20240501T000000Z", "20240501T000000Z", kReads | kStoredKey},
    {"20240501T134507Z", "20240501T134507Z", kReads | kStoredKey},
    {"20240501T134507.123456Z", "20240501T134507.123456Z", kReads | kStoredKey},
    {"20240501T134507.5Z", "20240501T134507.500000Z", kReads},
    {"20240501T000000.5Z", "20240501T000000.500000Z", kReads},
    {"20240501T134507.1234567Z", "20240501T134507.123457Z", kReads},
    {"20240501T240000Z", "20240502T000000Z", kReads},
    {"20161231T235960Z", "20170101T000000Z", kReads},
    {"00000101T000000Z", "00000101T000000Z", kStoredKey},
    {"00010101T000000Z", "00010101T000000Z", kReads | kStoredKey},
    {"99991231T235959.999999Z", "99991231T235959.999999Z", kReads | kStoredKey},
    {"+100000101T000000Z", "+100000101T000000Z", kStoredKey},
    {"+123450101T000000Z", "+123450101T000000Z", kStoredKey},
    {"-00440315T120000Z", "-00440315T120000Z", kStoredKey},
    {"20240501t000000Z", "", 0},
    {"20240501T000000z", "", 0},
    {"20240501T000000.Z", "", 0},
    {"20240501T000000", "", 0},
    {"20240501T000000+0200", "", 0},
    {"20240501T0000Z", "", 0},
    {"20240230T000000Z", "", 0},
    {"20241301T000000Z", "", 0},
    {"020240501T000000Z", "", 0},
    {"2024-05-01T000000Z", "", 0},

    // Digits alone: Unix seconds where an instant is read, but never eight unsigned digits
    // (an ISO 8601 basic date as much as seconds of 1970-1973).
    {"20240501", "", 0},
    {"1714521600", "20240501T000000Z", kInstant},
    {"1577836800", "20200101T000000Z", kInstant},
    {"0", "19700101T000000Z", kInstant},
    {"10", "19700101T000010Z", kInstant},
    {"-1", "19691231T235959Z", kInstant},
    {"-20200101", "19690512T045139Z", kInstant},
    {"020200101", "19700822T190821Z", kInstant},
    {"99999999999", "51381116T094639Z", kInstant},
    {"-99999999999", "-11990215T141321Z", kInstant},
    {"99999999999999999999", "", 0},
    {"+1714521600", "", 0},
    {"1714521600.5", "", 0},
};

}  // namespace tally::timestamp_cases
