import Foundation

/// JSON written by hand, field by field, for the documents a run writes on its critical path: the
/// published catalog (`Catalog.encoded()`) and a queue run's plan (`PrestagePlan.encoded()`).
///
/// `JSONEncoder` took 7-9 ms for a catalog of 500 packages, and as much again for the plan: both
/// on one core, at the end and at the start of a run, with nothing else to do meanwhile. Pretty
/// output is byte for byte what `JSONEncoder` writes with `.prettyPrinted`: two spaces per level,
/// `"key" : value`, and an empty array or object as an opening bracket, an empty line, and the
/// closing one at its level. Compact output has no whitespace. The caller writes keys in the
/// order `.sortedKeys` would; strings are escaped by `JSONLine.appendString`, `JSONEncoder`'s
/// escapes with `.withoutEscapingSlashes`. `CatalogEncodingTests` compares both with `JSONEncoder`.
struct JSONText {
    private(set) var bytes: [UInt8] = []
    private let pretty: Bool
    /// Whether the innermost open object or array has no member yet.
    private var empty: [Bool] = []

    init(pretty: Bool, capacity: Int = 0) {
        self.pretty = pretty
        bytes.reserveCapacity(capacity)
    }

    mutating func openObject() {
        bytes.append(UInt8(ascii: "{"))
        empty.append(true)
    }

    mutating func closeObject() { close(UInt8(ascii: "}")) }

    mutating func openArray() {
        bytes.append(UInt8(ascii: "["))
        empty.append(true)
    }

    mutating func closeArray() { close(UInt8(ascii: "]")) }

    /// Starts an object's member: the separator, the key and the colon. Keys are ASCII names
    /// that need no escape.
    mutating func key(_ name: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        if pretty {
            bytes.append(contentsOf: [UInt8(ascii: " "), UInt8(ascii: ":"), UInt8(ascii: " ")])
        } else {
            bytes.append(UInt8(ascii: ":"))
        }
    }

    /// Starts an array's element: the separator.
    mutating func element() { separate() }

    mutating func string(_ text: String) { JSONLine.appendString(text, to: &bytes) }

    mutating func number(_ value: Int64) { bytes.append(contentsOf: String(value).utf8) }

    /// A finite double, in Swift's shortest form that reads back as the same value
    /// (`JSONDecoder` reads `1.0`, `1e-05` and `1.2345678901234567e+20` alike).
    mutating func number(_ value: Double) { bytes.append(contentsOf: value.description.utf8) }

    mutating func null() { bytes.append(contentsOf: [UInt8(ascii: "n"), UInt8(ascii: "u"), UInt8(ascii: "l"), UInt8(ascii: "l")]) }

    mutating func strings(_ texts: [String]) {
        openArray()
        for text in texts {
            element()
            string(text)
        }
        closeArray()
    }

    private mutating func separate() {
        if empty[empty.count - 1] {
            empty[empty.count - 1] = false
        } else {
            bytes.append(UInt8(ascii: ","))
        }
        newline(depth: empty.count)
    }

    private mutating func close(_ bracket: UInt8) {
        let wasEmpty = empty.removeLast()
        if pretty {
            if wasEmpty { bytes.append(UInt8(ascii: "\n")) }
            newline(depth: empty.count)
        }
        bytes.append(bracket)
    }

    private mutating func newline(depth: Int) {
        guard pretty else { return }
        bytes.append(UInt8(ascii: "\n"))
        bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }
}

extension Catalog {
    /// Writes the catalog's members, keys in `.sortedKeys` order, absent optionals left out.
    /// `date` writes an item's `publishedAt`.
    func write(to json: inout JSONText, date: (Date, inout JSONText) -> Void) {
        json.openObject()
        json.key("bundleId")
        json.string(bundleId)
        json.key("products")
        json.openArray()
        for product in products {
            json.element()
            json.openObject()
            if let content = product.content {
                json.key("content")
                content.write(to: &json)
            }
            if let items = product.items {
                json.key("items")
                json.openArray()
                for item in items {
                    json.element()
                    json.openObject()
                    json.key("content")
                    item.content.write(to: &json)
                    json.key("itemId")
                    json.string(item.itemId)
                    json.key("publishedAt")
                    date(item.publishedAt, &json)
                    json.closeObject()
                }
                json.closeArray()
            }
            json.key("productId")
            json.string(product.productId)
            json.key("type")
            json.string(product.type.rawValue)
            json.closeObject()
        }
        json.closeArray()
        json.closeObject()
    }
}

extension Catalog.Content {
    func write(to json: inout JSONText) {
        json.openObject()
        if let delivery {
            json.key("delivery")
            json.string(delivery.rawValue)
        }
        json.key("length")
        json.number(length)
        if let manifest {
            json.key("manifest")
            json.openObject()
            json.key("length")
            json.number(manifest.length)
            json.key("sha256")
            json.string(manifest.sha256)
            json.key("url")
            json.string(manifest.url)
            json.closeObject()
        }
        if let mirrors {
            json.key("mirrors")
            json.strings(mirrors)
        }
        json.key("placement")
        json.string(placement.rawValue)
        if let preservation {
            json.key("preservation")
            json.string(preservation.rawValue)
        }
        json.key("sha256")
        json.string(sha256)
        if let unpackedLength {
            json.key("unpackedLength")
            json.number(unpackedLength)
        }
        json.key("url")
        json.string(url)
        json.key("version")
        json.string(version)
        json.closeObject()
    }
}
